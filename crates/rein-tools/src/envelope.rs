//! The envelope: the JSON the model sees for a tool call. It says the `status` (`ok`, `queued`,
//! `refused`, `busy`, `pending_approval`), carries the rung's `result`, and for anything but the
//! exact primary's answer the provenance the model must honour: `degraded`, `fidelity`,
//! `source`, `age_ms`/`age_minutes` for cached results, and a `detail` sentence saying what
//! happened, what it may claim and what it can still do. Every envelope is built here, so the
//! provenance discipline has one home.

use rein_store::tools::Hold;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::config::Fidelity;
use crate::ladder::{Rung, Tool};
use crate::wording::{Situation, Vars, Wording, human_age};

/// The fields that carry provenance; an envelope stripped of them can no longer tell the model
/// what it may claim.
pub const PROVENANCE_FIELDS: &[&str] =
    &["degraded", "fidelity", "source", "age_ms", "age_minutes", "detail"];

/// What happened to a tool call, as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// A rung answered (see `degraded` and `fidelity` for which kind of answer).
    Ok,
    /// A write is durably queued and has not executed yet.
    Queued,
    /// No answer: the ladder ran out, the backend rejected the arguments, or a person said no.
    Refused,
    /// A full bulkhead: retry after `retry_after_ms`; nothing ran.
    Busy,
    /// A write held by a gate until a person decides; it has not executed.
    PendingApproval,
    /// The agent's run is stopped (a stop condition held): nothing ran; `detail` says what to
    /// tell the customer instead.
    Stopped,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Ok => "ok",
            ToolStatus::Queued => "queued",
            ToolStatus::Refused => "refused",
            ToolStatus::Busy => "busy",
            ToolStatus::PendingApproval => "pending_approval",
            ToolStatus::Stopped => "stopped",
        }
    }

    pub fn parse(text: &str) -> Option<ToolStatus> {
        Some(match text {
            "ok" => ToolStatus::Ok,
            "queued" => ToolStatus::Queued,
            "refused" => ToolStatus::Refused,
            "busy" => ToolStatus::Busy,
            "pending_approval" => ToolStatus::PendingApproval,
            _ => return None,
        })
    }
}

/// Which rung served (or refused) a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RungRef {
    pub index: usize,
    pub source: String,
}

/// An envelope before it becomes JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub status: ToolStatus,
    pub tool: String,
    pub result: Option<Value>,
    /// False only for the exact primary's own answer.
    pub degraded: bool,
    pub fidelity: Option<Fidelity>,
    pub source: Option<String>,
    /// For cached results: how old the answer is.
    pub age_ms: Option<i64>,
    pub detail: Option<String>,
    pub idempotency_key: Option<String>,
    pub hold_id: Option<i64>,
    pub retry_after_ms: Option<u64>,
    pub rung: Option<RungRef>,
    /// A write that may or may not have executed (shown only when true).
    pub outcome_unknown: bool,
    pub elapsed_ms: u64,
}

impl Envelope {
    fn new(status: ToolStatus, tool: &str, elapsed_ms: u64) -> Self {
        Self {
            status,
            tool: tool.to_string(),
            result: None,
            degraded: true,
            fidelity: None,
            source: None,
            age_ms: None,
            detail: None,
            idempotency_key: None,
            hold_id: None,
            retry_after_ms: None,
            rung: None,
            outcome_unknown: false,
            elapsed_ms,
        }
    }

    /// The JSON the model sees.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("status".into(), json!(self.status.as_str()));
        map.insert("tool".into(), json!(self.tool));
        if let Some(result) = &self.result {
            map.insert("result".into(), result.clone());
        }
        map.insert("degraded".into(), json!(self.degraded));
        if let Some(fidelity) = self.fidelity {
            map.insert("fidelity".into(), json!(fidelity.as_str()));
        }
        if let Some(source) = &self.source {
            map.insert("source".into(), json!(source));
        }
        if let Some(age_ms) = self.age_ms {
            map.insert("age_ms".into(), json!(age_ms));
            map.insert("age_minutes".into(), json!(age_ms / 60_000));
        }
        if let Some(key) = &self.idempotency_key {
            map.insert("idempotency_key".into(), json!(key));
        }
        if let Some(hold_id) = self.hold_id {
            map.insert("hold_id".into(), json!(hold_id));
        }
        if let Some(retry_after_ms) = self.retry_after_ms {
            map.insert("retry_after_ms".into(), json!(retry_after_ms));
        }
        if self.outcome_unknown {
            map.insert("outcome_unknown".into(), json!(true));
        }
        if let Some(detail) = &self.detail {
            map.insert("detail".into(), json!(detail));
        }
        if let Some(rung) = &self.rung {
            map.insert("rung".into(), json!({"index": rung.index, "source": rung.source}));
        }
        map.insert("elapsed_ms".into(), json!(self.elapsed_ms));
        Value::Object(map)
    }
}

fn rung_ref(rung: &Rung) -> Option<RungRef> {
    Some(RungRef { index: rung.index, source: rung.source.clone() })
}

/// A rung answered with `result` (`age_ms` for a cached one) to a call with `args`. Only the
/// first rung at fidelity `exact` answers without provenance.
pub(crate) fn served(
    tool: &Tool,
    rung: &Rung,
    result: Value,
    age_ms: Option<i64>,
    key: Option<&str>,
    args: &Value,
    elapsed_ms: u64,
) -> Envelope {
    let mut envelope = Envelope::new(ToolStatus::Ok, &tool.name, elapsed_ms);
    envelope.result = Some(result);
    envelope.idempotency_key = key.map(str::to_string);
    envelope.rung = rung_ref(rung);
    envelope.degraded = !(rung.index == 0 && rung.fidelity == Fidelity::Exact);
    if envelope.degraded {
        let situation = match rung.fidelity {
            Fidelity::Exact => Situation::Exact,
            Fidelity::Fresh => Situation::Fresh,
            Fidelity::Stale => Situation::Stale,
            Fidelity::Partial | Fidelity::Deferred => Situation::Partial,
        };
        let vars = Vars {
            tool: &tool.name,
            age: age_ms.map(human_age),
            source: Some(&rung.source),
            key,
            args: Some(args),
            ..Vars::default()
        };
        envelope.fidelity = Some(rung.fidelity);
        envelope.source = Some(rung.source.clone());
        envelope.age_ms = age_ms.map(|age| age.max(0));
        envelope.detail = Some(tool.wording.render(situation, &vars));
    }
    envelope
}

/// A write durably queued by the `queue` rung; `outcome_unknown` when an earlier send may have
/// executed it (then it never says "not executed").
pub(crate) fn queued(
    tool: &Tool,
    rung: &Rung,
    key: &str,
    outcome_unknown: bool,
    args: &Value,
    elapsed_ms: u64,
) -> Envelope {
    let mut envelope = Envelope::new(ToolStatus::Queued, &tool.name, elapsed_ms);
    envelope.fidelity = Some(Fidelity::Deferred);
    envelope.source = Some(rung.source.clone());
    envelope.idempotency_key = Some(key.to_string());
    envelope.rung = rung_ref(rung);
    envelope.outcome_unknown = outcome_unknown;
    let vars = Vars {
        tool: &tool.name,
        source: Some(&rung.source),
        key: Some(key),
        args: Some(args),
        ..Vars::default()
    };
    let situation = if outcome_unknown { Situation::QueuedUnknown } else { Situation::Queued };
    envelope.detail = Some(tool.wording.render(situation, &vars));
    envelope
}

/// A write whose outcome is unknown, held in the outbox for a person (`idempotency = "none"`).
pub(crate) fn held_for_review(
    tool: &Tool,
    source: &str,
    key: &str,
    args: &Value,
    elapsed_ms: u64,
) -> Envelope {
    let mut envelope = Envelope::new(ToolStatus::Queued, &tool.name, elapsed_ms);
    envelope.fidelity = Some(Fidelity::Deferred);
    envelope.source = Some(source.to_string());
    envelope.idempotency_key = Some(key.to_string());
    envelope.outcome_unknown = true;
    let vars = Vars {
        tool: &tool.name,
        source: Some(source),
        key: Some(key),
        args: Some(args),
        ..Vars::default()
    };
    envelope.detail = Some(tool.wording.render(Situation::HeldForReview, &vars));
    envelope
}

/// The ladder ran out (`Refused`, `RefusedWrite`, `UnknownOutcome`) or a backend rejected the
/// arguments (`RejectedArgs`, with its message as `reason` and its rung as `source`); `args`
/// are the call's, for the wording's `{arg.NAME}`.
pub(crate) fn refused(
    tool: &Tool,
    situation: Situation,
    source: Option<&Rung>,
    reason: Option<&str>,
    key: Option<&str>,
    args: &Value,
    elapsed_ms: u64,
) -> Envelope {
    let mut envelope = Envelope::new(ToolStatus::Refused, &tool.name, elapsed_ms);
    envelope.source = source.map(|rung| rung.source.clone());
    envelope.rung = source.and_then(rung_ref);
    envelope.idempotency_key = key.map(str::to_string);
    envelope.outcome_unknown = situation == Situation::UnknownOutcome;
    let vars = Vars {
        tool: &tool.name,
        source: source.map(|rung| rung.source.as_str()),
        key,
        reason,
        args: Some(args),
        ..Vars::default()
    };
    envelope.detail = Some(tool.wording.render(situation, &vars));
    envelope
}

/// The answer to a tool call in a stopped run: nothing ran; `stop` is the run's status
/// (`stopped_repeated_call`, ...) and `detail` what the model should say instead.
pub fn stopped(tool: &str, stop: &str, detail: &str) -> Value {
    let mut envelope = Envelope::new(ToolStatus::Stopped, tool, 0);
    envelope.detail = Some(detail.to_string());
    let mut json = envelope.to_json();
    if let Value::Object(map) = &mut json {
        map.insert("stop".into(), json!(stop));
    }
    json
}

/// A call that was not made because the caller got it wrong (`message` says how): refused, to
/// be corrected rather than repeated.
pub fn not_made(tool: &str, message: &str) -> Value {
    let mut envelope = Envelope::new(ToolStatus::Refused, tool, 0);
    envelope.detail = Some(format!(
        "The call was not made: {message} Fix the call before trying again; do not repeat it unchanged."
    ));
    envelope.to_json()
}

/// The repeat of a call (the same key) while the first is still running: busy, under that key,
/// with when to ask again; it never runs twice.
pub fn in_flight(tool: &str, key: &str, retry_after_ms: u64) -> Value {
    let mut envelope = Envelope::new(ToolStatus::Busy, tool, 0);
    envelope.idempotency_key = Some(key.to_string());
    envelope.retry_after_ms = Some(retry_after_ms);
    envelope.detail = Some(format!(
        "This call is still in flight (the same call was made moments ago and has not finished). It will not run twice. Ask again after {retry_after_ms} ms for its result; do not tell the user it is done or that it failed."
    ));
    envelope.to_json()
}

/// A full bulkhead in front of `rung` (`key`: a write's, free to be sent again).
pub(crate) fn busy(
    tool: &Tool,
    rung: &Rung,
    retry_after_ms: u64,
    key: Option<&str>,
    args: &Value,
    elapsed_ms: u64,
) -> Envelope {
    let mut envelope = Envelope::new(ToolStatus::Busy, &tool.name, elapsed_ms);
    envelope.source = Some(rung.source.clone());
    envelope.retry_after_ms = Some(retry_after_ms);
    envelope.idempotency_key = key.map(str::to_string);
    let vars = Vars {
        tool: &tool.name,
        source: Some(&rung.source),
        retry_after_ms: Some(retry_after_ms),
        key,
        args: Some(args),
        ..Vars::default()
    };
    envelope.detail = Some(tool.wording.render(Situation::Busy, &vars));
    envelope
}

/// A write held by a gate (`hold_id` once the hold exists).
pub(crate) fn pending_approval(
    tool: &Tool,
    key: &str,
    hold_id: Option<i64>,
    reason: &str,
    args: &Value,
    elapsed_ms: u64,
) -> Envelope {
    let mut envelope = Envelope::new(ToolStatus::PendingApproval, &tool.name, elapsed_ms);
    envelope.idempotency_key = Some(key.to_string());
    envelope.hold_id = hold_id;
    let vars = Vars {
        tool: &tool.name,
        key: Some(key),
        reason: Some(reason),
        args: Some(args),
        ..Vars::default()
    };
    envelope.detail = Some(tool.wording.render(Situation::PendingApproval, &vars));
    envelope
}

/// A person's decision on `hold`: approved (queued) or rejected (refused, final). Takes the
/// wording rather than the tool, so a hold still gets an honest sentence after its tool left
/// the config.
pub(crate) fn decided(
    hold: &Hold,
    wording: &Wording,
    queue_source: Option<&str>,
    approved: bool,
    reason: &str,
) -> Envelope {
    let (tool, key) = (hold.tool.as_str(), hold.idempotency_key.as_str());
    let status = if approved { ToolStatus::Queued } else { ToolStatus::Refused };
    let mut envelope = Envelope::new(status, tool, 0);
    envelope.idempotency_key = Some(key.to_string());
    envelope.hold_id = Some(hold.id);
    if approved {
        envelope.fidelity = Some(Fidelity::Deferred);
        envelope.source = Some(queue_source.unwrap_or("outbox").to_string());
    }
    let situation = if approved { Situation::Approved } else { Situation::Rejected };
    let vars = Vars {
        tool,
        key: Some(key),
        reason: Some(reason),
        args: Some(&hold.args),
        ..Vars::default()
    };
    envelope.detail = Some(wording.render(situation, &vars));
    envelope
}

/// The replay worker's final word on a queued write with `args`: executed by `rung` with
/// `result`, or refused for good with the backend's `reason`.
pub(crate) fn replay_final(
    tool: &Tool,
    rung: &Rung,
    key: &str,
    outcome: Result<Value, &str>,
    args: &Value,
    elapsed_ms: u64,
) -> Envelope {
    let (status, situation) = match outcome {
        Ok(_) => (ToolStatus::Ok, Situation::Replayed),
        Err(_) => (ToolStatus::Refused, Situation::Failed),
    };
    let mut envelope = Envelope::new(status, &tool.name, elapsed_ms);
    envelope.idempotency_key = Some(key.to_string());
    envelope.rung = rung_ref(rung);
    let reason = match outcome {
        Ok(result) => {
            envelope.degraded = !(rung.index == 0 && rung.fidelity == Fidelity::Exact);
            if envelope.degraded {
                envelope.fidelity = Some(rung.fidelity);
            }
            envelope.result = Some(result);
            None
        }
        Err(reason) => Some(reason),
    };
    envelope.source = Some(rung.source.clone());
    let vars = Vars {
        tool: &tool.name,
        source: Some(&rung.source),
        key: Some(key),
        reason,
        args: Some(args),
        ..Vars::default()
    };
    envelope.detail = Some(tool.wording.render(situation, &vars));
    envelope
}
