//! Writes: never substituted, only deferred. A write's idempotency key is settled before the
//! first attempt (the caller's, derived from the conversation, or minted) and claimed in the
//! store (`key_begin`): a repeat gets the stored result and nothing runs. Then the gates, in
//! code, on the arguments; a held write waits for a person ([`Dispatcher::decide`]). Then the
//! http rungs, each send carrying `Idempotency-Key`, and the `queue` rung, which puts the write
//! in the durable outbox for the replay worker.
//!
//! The key's fate when the ladder runs out depends on what may have happened. If nothing could
//! have executed (breaker open, connection refused, busy, a 503 or 429, rein's credentials
//! refused with 401/403), the key is abandoned, so a retry with it starts afresh. If a request
//! may have executed (a timeout after sending, another 5xx, a dropped connection) the outcome
//! is unknown, and it is never reported as not executed: the write is queued with
//! `outcome_unknown` (or held for review when the tool declares no guard, `idempotency =
//! "none"`), or without a queue rung the key is kept `InFlight`: a retry within the key's lease
//! gets `KeyInFlight` (409), and once the lease expires `key_begin` answers `TakenOver`. Every
//! resend after an unknown outcome, live or replayed, passes the tool's duplicate guard first
//! (`guard.rs`). A 4xx other than 401/403 is the backend's final answer for those arguments
//! and is stored, as Stripe stores it.

use std::time::Duration;

use rein_core::{CallContext, Deadline};
use rein_store::StoreError;
use rein_store::tools::{Decision, Hold, HoldState, KeyBegin, NewHold, NewOutboxItem};
use serde_json::Value;

use crate::config::compile::DEFAULT_QUEUE_TIMEOUT_MS;
use crate::config::{Idempotency, KeyFrom};
use crate::dispatcher::{Dispatcher, Resolution, ToolOutcome, admit, outcome, resolve};
use crate::envelope::{self, Envelope, ToolStatus};
use crate::error::ToolError;
use crate::gate::{Gate, first_hold};
use crate::guard::{Guard, Write, duplicate_guard, lookup_url};
use crate::http::HttpOutcome;
use crate::keys::{args_hash, caller_prefix, conversation_key, mint_key};
use crate::ladder::{Rung, RungAction, Target, Tool};
use crate::trace::{RungLog, Turn};
use crate::wording::{Situation, Wording};
use rein_core::trace::SpanEvent;

/// One call of the write `tool`: its key, its gates, its http rungs and its queue rung.
pub(crate) async fn call_write(
    dispatcher: &Dispatcher,
    ctx: &CallContext,
    tool: &Tool,
    args: &Value,
    targets: &[Option<Target<'_>>],
    log: &RungLog,
    caller: Option<&str>,
) -> Result<ToolOutcome, ToolError> {
    let deadline = ctx.deadline();
    let (key, reissue) = settle_key(dispatcher, ctx, tool, args, caller).await?;
    if reissue {
        let event = SpanEvent::new("reissue_recognised", log.now_ms());
        log.event(event.with("rein.idempotency_key", key.as_str()));
        tracing::info!(tool = %tool.name, key = %key, "a re-issue of an earlier call: answered under its key");
    }
    let conversation = ctx.conversation_id.as_deref();
    let write = Write { key: &key, args, conversation_id: conversation };
    if let Some(lookup) = &tool.lookup {
        // The lookup must be possible before anything is sent that it may have to find.
        if let Err(message) = lookup_url(lookup, write) {
            if conversation.is_none() && message.contains("`conversation_id`") {
                return Err(ToolError::MissingConversation { tool: tool.name.clone() });
            }
            return Err(ToolError::BadArgs(format!("the lookup of `{}`: {message}", tool.name)));
        }
    }
    let maybe_executed = match claim_key(dispatcher, tool, &key, args).await? {
        Claim::Go { maybe_executed } => {
            if maybe_executed {
                log.event(SpanEvent::new("key_taken_over", log.now_ms()));
            }
            maybe_executed
        }
        Claim::Answered(outcome) => {
            log.event(SpanEvent::new("key_replayed", log.now_ms()).with("rein.replayed", true));
            return Ok(outcome);
        }
    };
    if let Some(gate) = first_hold(&tool.gates, args) {
        log.event(
            SpanEvent::new("gate_held", log.now_ms()).with("rein.gate", gate.reason.as_str()),
        );
        let (args, conversation) = (args.clone(), ctx.conversation_id.clone());
        return hold(dispatcher, tool, &key, args, conversation, gate, deadline).await;
    }
    let queue = tool.rungs.iter().find(|rung| matches!(rung.action, RungAction::Queue));
    // Keep the queue rung's budget out of the http rungs' share of the deadline, so a
    // deadline that cuts the primary short still leaves time to queue the write durably.
    let reserve = queue.map_or(Duration::from_millis(DEFAULT_QUEUE_TIMEOUT_MS), |r| r.timeout);
    let sends = Sends { dispatcher, tool, key: &key, write, deadline, reserve, log };
    let (mut maybe_executed, review) = match sends.walk(targets, maybe_executed).await {
        Sent::Done(outcome) => return Ok(outcome),
        Sent::Unsent { maybe_executed, review } => (maybe_executed, review),
    };
    // An unknown outcome of a tool without a machine guard waits for a person, queue rung
    // or not: it must never be resent on its own.
    let review = review || (maybe_executed && tool.idempotency == Idempotency::Review);
    if review || queue.is_some() {
        match defer(&sends, ctx, queue, maybe_executed, review).await {
            Ok(outcome) => return Ok(outcome),
            Err(unknown) => maybe_executed |= unknown,
        }
    }
    let situation = if maybe_executed {
        // The key stays in flight: a retry after its lease passes the guard again.
        Situation::UnknownOutcome
    } else {
        release_key(dispatcher, &key, false).await;
        Situation::RefusedWrite
    };
    let elapsed = deadline.elapsed_ms();
    let envelope = envelope::refused(tool, situation, None, None, Some(&key), args, elapsed);
    Ok(dispatcher.finish(tool, envelope, None))
}

/// The write's idempotency key: the caller's, derived from the conversation, or minted.
async fn settle_key(
    dispatcher: &Dispatcher,
    ctx: &CallContext,
    tool: &Tool,
    args: &Value,
    caller: Option<&str>,
) -> Result<(String, bool), ToolError> {
    let (key, reissue) = match (ctx.idempotency_key.as_deref(), tool.key_from) {
        (Some(key), _) => (key.to_string(), false),
        (None, Some(KeyFrom::Conversation)) => match ctx.conversation_id.as_deref() {
            Some(conversation) if !conversation.is_empty() => {
                (conversation_key(&tool.name, conversation), false)
            }
            _ => return Err(ToolError::MissingConversation { tool: tool.name.clone() }),
        },
        (None, None) => match caller {
            Some(caller) if !dispatcher.reissue_window().is_zero() => {
                reissued_key(dispatcher, tool, args, caller).await?
            }
            _ => (mint_key(), false),
        },
    };
    check_key(&key)?;
    Ok((key, reissue))
}

/// The key of `caller`'s call of `tool` with these arguments inside the re-issue window, if
/// there is one (the call is its re-issue), else a new key marked as `caller`'s.
async fn reissued_key(
    dispatcher: &Dispatcher,
    tool: &Tool,
    args: &Value,
    caller: &str,
) -> Result<(String, bool), ToolError> {
    let prefix = caller_prefix(caller);
    let window = i64::try_from(dispatcher.reissue_window().as_millis()).unwrap_or(i64::MAX);
    let since = dispatcher.clock.now_unix_ms().saturating_sub(window);
    let hash = args_hash(args);
    match dispatcher.store.key_recent(&tool.name, &hash, &prefix, since).await? {
        Some(key) => Ok((key, true)),
        None => Ok((format!("{prefix}{}", mint_key()), false)),
    }
}

/// What claiming the key in the store says.
enum Claim {
    /// Go on; `maybe_executed`: an earlier holder's request may have reached the backend.
    Go { maybe_executed: bool },
    /// A repeat: the stored result, with nothing run.
    Answered(ToolOutcome),
}

/// Claim `key` for this call under the tool's lease.
async fn claim_key(
    dispatcher: &Dispatcher,
    tool: &Tool,
    key: &str,
    args: &Value,
) -> Result<Claim, ToolError> {
    let hash = args_hash(args);
    let now = dispatcher.clock.now_unix_ms();
    let lease_ms = i64::try_from(tool.key_lease.as_millis()).unwrap_or(i64::MAX);
    match dispatcher.store.key_begin(key, &tool.name, &hash, now, lease_ms).await? {
        KeyBegin::Fresh => Ok(Claim::Go { maybe_executed: false }),
        // The earlier holder's request may have reached the backend: resend with the same key,
        // behind the tool's duplicate guard.
        KeyBegin::TakenOver => Ok(Claim::Go { maybe_executed: true }),
        KeyBegin::InFlight { lease_until_unix_ms } => {
            let retry_after_ms = u64::try_from(lease_until_unix_ms - now).unwrap_or(0);
            Err(ToolError::KeyInFlight { key: key.to_string(), retry_after_ms })
        }
        KeyBegin::Mismatch { tool } => Err(ToolError::KeyMismatch { key: key.to_string(), tool }),
        KeyBegin::Stored { result, .. } => stored(result).map(Claim::Answered),
    }
}

/// How the walk of the http rungs ended.
enum Sent {
    /// A rung settled the call (executed, refused, found by the guard, busy).
    Done(ToolOutcome),
    /// No rung executed it. `maybe_executed`: a send may have executed all the same;
    /// `review`: the duplicate guard cannot clear a resend, so a person decides.
    Unsent { maybe_executed: bool, review: bool },
}

/// One write's walk over its http rungs.
struct Sends<'a> {
    dispatcher: &'a Dispatcher,
    tool: &'a Tool,
    key: &'a str,
    write: Write<'a>,
    deadline: &'a Deadline,
    /// Kept for the queue rung out of every http rung's budget.
    reserve: Duration,
    log: &'a RungLog,
}

impl Sends<'_> {
    /// Send to each http rung in turn until one settles the call.
    async fn walk(&self, targets: &[Option<Target<'_>>], mut maybe_executed: bool) -> Sent {
        let (dispatcher, tool, key, deadline, log) =
            (self.dispatcher, self.tool, self.key, self.deadline, self.log);
        for (rung, target) in tool.rungs.iter().zip(targets) {
            let Some(target) = target else { continue };
            let budget = deadline.cut_leaving(rung.timeout, self.reserve);
            if budget.is_zero() {
                tracing::debug!(tool = %tool.name, rung = %rung.source, "skipped: no time left before the deadline");
                log.skipped(rung, "no_time_left");
                continue;
            }
            if maybe_executed {
                // An earlier send may have executed: only the tool's guard lets another go.
                let guard = duplicate_guard(dispatcher, tool, self.write, budget).await;
                let said = match &guard {
                    Guard::Send => "send",
                    Guard::Found(_) => "found",
                    Guard::Wait(_) => "wait",
                    Guard::Review => "review",
                };
                log.event(
                    SpanEvent::new("duplicate_guard", log.now_ms())
                        .with("rein.guard", said)
                        .with("rein.rung", rung.source.as_str()),
                );
                match guard {
                    Guard::Send => {}
                    Guard::Found(result) => {
                        let done = write_done(self, rung, result);
                        return Sent::Done(done.await);
                    }
                    Guard::Wait(reason) => {
                        tracing::warn!(tool = %tool.name, rung = %rung.source, %reason, "not resending: the duplicate guard could not clear it");
                        break;
                    }
                    Guard::Review => return Sent::Unsent { maybe_executed, review: true },
                }
            }
            let budget = deadline.cut_leaving(rung.timeout, self.reserve);
            let Some(permit) = admit(rung) else {
                tracing::debug!(tool = %tool.name, rung = %rung.source, "skipped: breaker open");
                log.skipped(rung, "breaker_open");
                continue;
            };
            let start_ms = log.now_ms();
            let turn = |turn: Turn, reason: Option<&str>, status: Option<u16>| {
                log.rung(rung, start_ms, turn, reason, status);
            };
            let bulkhead = target.bulkhead();
            let Some(_slot) = bulkhead.try_enter() else {
                resolve(permit, Resolution::Unused);
                turn(Turn::Busy, Some("bulkhead_full"), None);
                if maybe_executed {
                    // An earlier send may have executed: queue (same key) rather than let go.
                    break;
                }
                release_key(dispatcher, key, false).await;
                let args = self.write.args;
                return Sent::Done(dispatcher.busy(
                    tool,
                    rung,
                    bulkhead,
                    Some(key),
                    args,
                    deadline,
                ));
            };
            let args = self.write.args;
            match target.send(dispatcher, args, Some(key), budget).await {
                HttpOutcome::Answered(result) => {
                    resolve(permit, Resolution::Succeeded);
                    turn(Turn::Served, None, None);
                    return Sent::Done(write_done(self, rung, result).await);
                }
                HttpOutcome::Unparseable { body } => {
                    // A 2xx executed the write; its body is reported as it came.
                    resolve(permit, Resolution::Succeeded);
                    turn(Turn::Served, Some("unparseable_body"), None);
                    return Sent::Done(write_done(self, rung, Value::String(body)).await);
                }
                HttpOutcome::Rejected { status, message } => {
                    resolve(permit, Resolution::Succeeded);
                    tracing::debug!(tool = %tool.name, rung = %rung.source, status, "backend rejected the write");
                    turn(Turn::Refused, Some("rejected_args"), Some(status));
                    let envelope = envelope::refused(
                        tool,
                        Situation::RejectedArgs,
                        Some(rung),
                        Some(&message),
                        Some(key),
                        args,
                        deadline.elapsed_ms(),
                    );
                    store_final(dispatcher, key, &envelope).await;
                    return Sent::Done(dispatcher.finish(tool, envelope, Some(rung)));
                }
                HttpOutcome::Unauthorized { status, message } => {
                    // rein's credentials, not the write's answer: nothing executed, and nothing
                    // final is stored, so a retry once they are fixed reaches the backend.
                    resolve(permit, Resolution::Failed);
                    tracing::error!(tool = %tool.name, rung = %rung.source, status, %message, "the backend refused rein's credentials (check the rung's headers_env)");
                    turn(Turn::Down, Some("unauthorized"), Some(status));
                }
                HttpOutcome::Failed { reason, may_have_executed } => {
                    resolve(permit, Resolution::Failed);
                    maybe_executed |= may_have_executed;
                    tracing::warn!(tool = %tool.name, rung = %rung.source, %reason, may_have_executed, "write not confirmed");
                    let (why, status) = crate::trace::failure(&reason);
                    turn(Turn::Down, Some(why), status);
                }
                HttpOutcome::TimedOut => {
                    resolve(permit, Resolution::Failed);
                    maybe_executed = true;
                    tracing::warn!(tool = %tool.name, rung = %rung.source, "write timed out: outcome unknown");
                    turn(Turn::Down, Some("timed_out"), None);
                }
            }
        }
        Sent::Unsent { maybe_executed, review: false }
    }
}

/// Put the write in the durable outbox: queued for the replay worker, or held for review.
/// `Err(unknown)` when it could not be queued; `unknown`: the enqueue may still commit.
async fn defer(
    sends: &Sends<'_>,
    ctx: &CallContext,
    queue: Option<&Rung>,
    maybe_executed: bool,
    review: bool,
) -> Result<ToolOutcome, bool> {
    let (dispatcher, tool, key, deadline) =
        (sends.dispatcher, sends.tool, sends.key, sends.deadline);
    let source = queue.map_or(REVIEW_SOURCE, |rung| rung.source.as_str());
    let (args, elapsed) = (sends.write.args, deadline.elapsed_ms());
    let envelope = match queue {
        Some(rung) if !review => envelope::queued(tool, rung, key, maybe_executed, args, elapsed),
        _ => envelope::held_for_review(tool, source, key, args, elapsed),
    };
    let item = NewOutboxItem {
        idempotency_key: key.to_string(),
        tool: tool.name.clone(),
        args: sends.write.args.clone(),
        conversation_id: ctx.conversation_id.clone(),
        outcome_unknown: maybe_executed,
        review,
    };
    let budget = deadline.cut(sends.reserve);
    let now = dispatcher.clock.now_unix_ms();
    let queued_result = envelope.to_json();
    let log = sends.log;
    let start_ms = log.now_ms();
    let enqueue = dispatcher.store.outbox_enqueue(&item, &queued_result, now);
    let note = |turn: Turn, reason: Option<&str>| match queue {
        Some(rung) => log.rung(rung, start_ms, turn, reason, None),
        None => {
            let event = SpanEvent::new("outbox", log.now_ms())
                .with("rein.disposition", if turn == Turn::Down { "down" } else { "review" });
            log.event(event);
        }
    };
    match tokio::time::timeout(budget, enqueue).await {
        Ok(Ok(_item)) => {
            if review {
                tracing::warn!(tool = %tool.name, "write outcome unknown: held for review (idempotency = \"none\")");
            }
            note(if review { Turn::Review } else { Turn::Queued }, None);
            Ok(dispatcher.finish(tool, envelope, queue))
        }
        Ok(Err(error)) => {
            tracing::error!(tool = %tool.name, %error, "could not queue the write");
            note(Turn::Down, Some("store_failed"));
            Err(false)
        }
        Err(_) => {
            // The enqueue may still commit: say the outcome is unknown, keep the key.
            tracing::error!(tool = %tool.name, "queueing the write timed out");
            note(Turn::Down, Some("timed_out"));
            Err(true)
        }
    }
}

/// The write executed (by `rung`): its result becomes the key's final result.
async fn write_done(sends: &Sends<'_>, rung: &Rung, result: Value) -> ToolOutcome {
    let (dispatcher, tool, key) = (sends.dispatcher, sends.tool, sends.key);
    let elapsed = sends.deadline.elapsed_ms();
    let args = sends.write.args;
    let envelope = envelope::served(tool, rung, result, None, Some(key), args, elapsed);
    store_final(dispatcher, key, &envelope).await;
    dispatcher.finish(tool, envelope, Some(rung))
}

/// Store a final result for `key`. If the store fails, the key stays `InFlight` until its
/// lease expires and a retry resends with the same key, which the backend deduplicates.
async fn store_final(dispatcher: &Dispatcher, key: &str, envelope: &Envelope) {
    let now = dispatcher.clock.now_unix_ms();
    if let Err(error) = dispatcher.store.key_finish(key, &envelope.to_json(), now).await {
        tracing::error!(%error, "could not store the write's result");
    }
}

/// Let go of a key whose request sent nothing that could have executed.
async fn release_key(dispatcher: &Dispatcher, key: &str, maybe_executed: bool) {
    if maybe_executed {
        return;
    }
    if let Err(error) = dispatcher.store.key_abandon(key).await {
        // The key stays InFlight until its lease expires; a retry then takes it over.
        tracing::warn!(%error, "could not abandon the idempotency key");
    }
}

/// A gate held the write: record the hold and answer `pending_approval`.
async fn hold(
    dispatcher: &Dispatcher,
    tool: &Tool,
    key: &str,
    args: Value,
    conversation_id: Option<String>,
    gate: &Gate,
    deadline: &Deadline,
) -> Result<ToolOutcome, ToolError> {
    let held =
        envelope::pending_approval(tool, key, None, &gate.reason, &args, deadline.elapsed_ms());
    let new_hold = NewHold {
        idempotency_key: key.to_string(),
        tool: tool.name.clone(),
        args,
        reason: gate.reason.clone(),
        conversation_id,
    };
    let now = dispatcher.clock.now_unix_ms();
    let hold = match dispatcher.store.hold_create(&new_hold, &held.to_json(), now).await {
        Ok(hold) => hold,
        Err(error) => {
            release_key(dispatcher, key, false).await;
            return Err(error.into());
        }
    };
    dispatcher.observer.gate_held(&tool.name);
    let elapsed = deadline.elapsed_ms();
    let envelope =
        envelope::pending_approval(tool, key, Some(hold.id), &gate.reason, &hold.args, elapsed);
    Ok(outcome(envelope, None, false))
}

/// Record a person's decision on the pending hold `hold_id`.
pub(crate) async fn decide(
    dispatcher: &Dispatcher,
    hold_id: i64,
    approve: bool,
    by: &str,
    note: &str,
) -> Result<Option<Hold>, ToolError> {
    let Some(hold) = dispatcher.store.hold_get(hold_id).await? else {
        return Ok(None);
    };
    if hold.state != HoldState::Pending {
        return Ok(None);
    }
    let tool = dispatcher.tool_now(&hold.tool);
    let tool = tool.as_deref();
    let default_wording = Wording::default();
    let wording = tool.map_or(&default_wording, |tool| &tool.wording);
    let reason = match (approve, note.trim()) {
        (true, _) => hold.reason.as_str(),
        (false, "") => "no reason given",
        (false, note) => note,
    };
    let queue_source = tool.and_then(Tool::queue_source);
    let envelope = envelope::decided(&hold, wording, queue_source, approve, reason).to_json();
    let decision = if approve {
        Decision::Approve { queued_result: envelope }
    } else {
        Decision::Reject { rejected_result: envelope }
    };
    let now = dispatcher.clock.now_unix_ms();
    Ok(dispatcher.store.hold_decide(hold_id, &decision, by, note, now).await?)
}

/// The `source` of a write held for review by a tool without a queue rung.
pub(crate) const REVIEW_SOURCE: &str = "outbox";

/// The longest idempotency key accepted (Stripe's limit).
const MAX_KEY_LEN: usize = 255;

/// A key must travel as an HTTP header on every attempt and replay: printable ASCII, not empty,
/// at most [`MAX_KEY_LEN`] characters. Checked before anything is stored.
fn check_key(key: &str) -> Result<(), ToolError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ToolError::BadArgs(format!(
            "the idempotency key must be 1 to {MAX_KEY_LEN} printable ASCII characters without spaces"
        )));
    }
    Ok(())
}

/// A repeated key: its stored envelope, as it was, with nothing run.
fn stored(result: Value) -> Result<ToolOutcome, ToolError> {
    let status =
        result.get("status").and_then(Value::as_str).and_then(ToolStatus::parse).ok_or_else(
            || {
                ToolError::Store(StoreError::Corrupt(
                    "a stored tool result has no readable `status`".into(),
                ))
            },
        )?;
    let served_by = result.pointer("/rung/source").and_then(Value::as_str).map(str::to_string);
    Ok(ToolOutcome {
        envelope: result,
        status,
        served_by,
        replayed: true,
        trace: rein_core::trace::Notes::default(),
    })
}
