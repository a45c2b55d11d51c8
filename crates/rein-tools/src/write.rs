//! Writes: never substituted, only deferred. A write's idempotency key is settled before the
//! first attempt (the caller's, derived from the conversation, or minted) and claimed in the
//! store (`key_begin`): a repeat gets the stored result and nothing runs. Then the gates, in
//! code, on the arguments; a held write waits for a person ([`Dispatcher::decide`]). Then the
//! http rungs, each send carrying `Idempotency-Key`, and the `queue` rung, which puts the write
//! in the durable outbox for the replay worker.
//!
//! The key's fate when the ladder runs out depends on what may have happened. If nothing could
//! have executed (breaker open, connection refused, busy), the key is abandoned, so a retry with
//! it starts afresh. If a request may have reached the backend (a timeout after sending, a 5xx,
//! a dropped connection) the key is kept `InFlight`: a retry within the key's lease gets
//! `KeyInFlight` (409), and once the lease expires `key_begin` answers `TakenOver` and the retry
//! sends again with the same key, which the backend deduplicates. A 4xx is the backend's final
//! answer for those arguments and is stored, as Stripe stores it.

use rein_store::StoreError;
use rein_store::tools::{Decision, Hold, HoldState, KeyBegin, NewHold};
use serde_json::Value;

use crate::config::KeyFrom;
use crate::dispatcher::{
    CallContext, Dispatcher, Resolution, Timing, ToolOutcome, admit, outcome, resolve,
};
use crate::envelope::{self, Envelope, ToolStatus};
use crate::error::ToolError;
use crate::gate::{Gate, first_hold};
use crate::http::{self, HttpOutcome};
use crate::keys::{args_hash, conversation_key, mint_key};
use crate::ladder::{Rung, RungAction, Tool};
use crate::wording::{Situation, Wording};

impl Dispatcher {
    pub(crate) async fn call_write(
        &self,
        tool: &Tool,
        args: Value,
        ctx: CallContext,
        timing: &Timing,
    ) -> Result<ToolOutcome, ToolError> {
        let key = match (ctx.idempotency_key.as_deref(), tool.key_from) {
            (Some(key), _) => key.to_string(),
            (None, Some(KeyFrom::Conversation)) => match ctx.conversation_id.as_deref() {
                Some(conversation) if !conversation.is_empty() => {
                    conversation_key(&tool.name, conversation)
                }
                _ => return Err(ToolError::MissingConversation { tool: tool.name.clone() }),
            },
            (None, None) => mint_key(),
        };
        check_key(&key)?;
        let hash = args_hash(&args);
        let now = self.clock.now_unix_ms();
        let lease_ms = i64::try_from(tool.key_lease.as_millis()).unwrap_or(i64::MAX);
        let mut maybe_executed =
            match self.store.key_begin(&key, &tool.name, &hash, now, lease_ms).await? {
                KeyBegin::Fresh => false,
                // The earlier holder's request may have reached the backend: resend, same key.
                KeyBegin::TakenOver => true,
                KeyBegin::InFlight { lease_until_unix_ms } => {
                    let retry_after_ms = u64::try_from(lease_until_unix_ms - now).unwrap_or(0);
                    return Err(ToolError::KeyInFlight { key, retry_after_ms });
                }
                KeyBegin::Mismatch { tool } => return Err(ToolError::KeyMismatch { key, tool }),
                KeyBegin::Stored { result, .. } => return stored(result),
            };

        if let Some(gate) = first_hold(&tool.gates, &args) {
            return self.hold(tool, &key, args, ctx.conversation_id, gate, timing).await;
        }

        let queue = tool.rungs.iter().find(|rung| matches!(rung.action, RungAction::Queue));
        // Keep the queue rung's budget out of the http rungs' share of the deadline, so a
        // deadline that cuts the primary short still leaves time to queue the write durably.
        let reserve = queue.map_or(std::time::Duration::ZERO, |rung| rung.timeout);
        for rung in &tool.rungs {
            let RungAction::Http(http) = &rung.action else { continue };
            let budget = timing.budget(rung.timeout, reserve);
            if budget.is_zero() {
                tracing::debug!(tool = %tool.name, rung = %rung.source, "skipped: no time left before the deadline");
                continue;
            }
            let Some(permit) = admit(rung) else {
                tracing::debug!(tool = %tool.name, rung = %rung.source, "skipped: breaker open");
                continue;
            };
            let url = match http.url.fill(&args) {
                Ok(url) => url,
                Err(problem) => {
                    resolve(permit, Resolution::Unused);
                    self.release_key(&key, maybe_executed).await;
                    let envelope = envelope::refused(
                        tool,
                        Situation::RejectedArgs,
                        Some(rung),
                        Some(&problem),
                        Some(&key),
                        timing.elapsed_ms(),
                    );
                    return Ok(self.finish(tool, envelope, Some(rung)));
                }
            };
            let Some(_slot) = http.bulkhead.try_enter() else {
                resolve(permit, Resolution::Unused);
                if maybe_executed {
                    // An earlier send may have executed: queue (same key) rather than let go.
                    break;
                }
                self.release_key(&key, false).await;
                return Ok(self.busy(tool, rung, http, Some(&key), timing));
            };
            match http::send(&self.http, http, &url, &args, Some(&key), budget).await {
                HttpOutcome::Answered(result) => {
                    resolve(permit, Resolution::Succeeded);
                    return Ok(self.write_done(tool, rung, &key, result, timing).await);
                }
                HttpOutcome::Unparseable { body } => {
                    // A 2xx executed the write; its body is reported as it came.
                    resolve(permit, Resolution::Succeeded);
                    return Ok(self
                        .write_done(tool, rung, &key, Value::String(body), timing)
                        .await);
                }
                HttpOutcome::Rejected { status, message } => {
                    resolve(permit, Resolution::Succeeded);
                    tracing::debug!(tool = %tool.name, rung = %rung.source, status, "backend rejected the write");
                    let envelope = envelope::refused(
                        tool,
                        Situation::RejectedArgs,
                        Some(rung),
                        Some(&message),
                        Some(&key),
                        timing.elapsed_ms(),
                    );
                    self.store_final(&key, &envelope).await;
                    return Ok(self.finish(tool, envelope, Some(rung)));
                }
                HttpOutcome::Failed { reason, sent } => {
                    resolve(permit, Resolution::Failed);
                    maybe_executed |= sent;
                    tracing::warn!(tool = %tool.name, rung = %rung.source, %reason, sent, "write not confirmed");
                }
                HttpOutcome::TimedOut => {
                    resolve(permit, Resolution::Failed);
                    maybe_executed = true;
                    tracing::warn!(tool = %tool.name, rung = %rung.source, "write timed out: outcome unknown");
                }
            }
        }

        if let Some(rung) = queue {
            let envelope = envelope::queued(tool, rung, &key, timing.elapsed_ms());
            let budget = timing.budget(rung.timeout, std::time::Duration::ZERO);
            let now = self.clock.now_unix_ms();
            let queued_result = envelope.to_json();
            let enqueue = self.store.outbox_enqueue(&key, &tool.name, &args, &queued_result, now);
            match tokio::time::timeout(budget, enqueue).await {
                Ok(Ok(_item)) => return Ok(self.finish(tool, envelope, Some(rung))),
                Ok(Err(error)) => {
                    tracing::error!(tool = %tool.name, %error, "could not queue the write");
                }
                Err(_) => {
                    // The enqueue may still commit: say the outcome is unknown, keep the key.
                    maybe_executed = true;
                    tracing::error!(tool = %tool.name, "queueing the write timed out");
                }
            }
        }

        let situation = if maybe_executed {
            Situation::UnknownOutcome
        } else {
            self.release_key(&key, false).await;
            Situation::RefusedWrite
        };
        let envelope =
            envelope::refused(tool, situation, None, None, Some(&key), timing.elapsed_ms());
        Ok(self.finish(tool, envelope, None))
    }

    /// The write executed: its result becomes the key's final result.
    async fn write_done(
        &self,
        tool: &Tool,
        rung: &Rung,
        key: &str,
        result: Value,
        timing: &Timing,
    ) -> ToolOutcome {
        let envelope = envelope::served(tool, rung, result, None, Some(key), timing.elapsed_ms());
        self.store_final(key, &envelope).await;
        self.finish(tool, envelope, Some(rung))
    }

    /// Store a final result for `key`. If the store fails, the key stays `InFlight` until its
    /// lease expires and a retry resends with the same key, which the backend deduplicates.
    async fn store_final(&self, key: &str, envelope: &Envelope) {
        let now = self.clock.now_unix_ms();
        if let Err(error) = self.store.key_finish(key, &envelope.to_json(), now).await {
            tracing::error!(%error, "could not store the write's result");
        }
    }

    /// Let go of a key whose request sent nothing that could have executed.
    async fn release_key(&self, key: &str, maybe_executed: bool) {
        if maybe_executed {
            return;
        }
        if let Err(error) = self.store.key_abandon(key).await {
            // The key stays InFlight until its lease expires; a retry then takes it over.
            tracing::warn!(%error, "could not abandon the idempotency key");
        }
    }

    /// A gate held the write: record the hold and answer `pending_approval`.
    async fn hold(
        &self,
        tool: &Tool,
        key: &str,
        args: Value,
        conversation_id: Option<String>,
        gate: &Gate,
        timing: &Timing,
    ) -> Result<ToolOutcome, ToolError> {
        let held = envelope::pending_approval(tool, key, None, &gate.reason, timing.elapsed_ms());
        let new_hold = NewHold {
            idempotency_key: key.to_string(),
            tool: tool.name.clone(),
            args,
            reason: gate.reason.clone(),
            conversation_id,
        };
        let now = self.clock.now_unix_ms();
        let hold = match self.store.hold_create(&new_hold, &held.to_json(), now).await {
            Ok(hold) => hold,
            Err(error) => {
                self.release_key(key, false).await;
                return Err(error.into());
            }
        };
        self.observer.gate_held(&tool.name);
        let envelope =
            envelope::pending_approval(tool, key, Some(hold.id), &gate.reason, timing.elapsed_ms());
        Ok(outcome(envelope, None, false))
    }

    /// A person's decision on a held write. Approval puts the write in the outbox (the replay
    /// worker sends it once, with its original key); rejection makes `refused` the key's final
    /// result. Only the first decision counts: `None` when the hold does not exist or was
    /// already decided.
    pub async fn decide(
        &self,
        hold_id: i64,
        approve: bool,
        by: &str,
        note: &str,
    ) -> Result<Option<Hold>, ToolError> {
        let Some(hold) = self.store.hold_get(hold_id).await? else {
            return Ok(None);
        };
        if hold.state != HoldState::Pending {
            return Ok(None);
        }
        let tool = self.tools.get(&hold.tool);
        let default_wording = Wording::default();
        let wording = tool.map_or(&default_wording, |tool| &tool.wording);
        let reason = match (approve, note.trim()) {
            (true, _) => hold.reason.as_str(),
            (false, "") => "no reason given",
            (false, note) => note,
        };
        let envelope = envelope::decided(
            &hold.tool,
            wording,
            tool.and_then(Tool::queue_source),
            &hold.idempotency_key,
            hold.id,
            approve,
            reason,
        )
        .to_json();
        let decision = if approve {
            Decision::Approve { queued_result: envelope }
        } else {
            Decision::Reject { rejected_result: envelope }
        };
        let now = self.clock.now_unix_ms();
        Ok(self.store.hold_decide(hold_id, &decision, by, note, now).await?)
    }
}

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
    Ok(ToolOutcome { envelope: result, status, served_by, replayed: true })
}
