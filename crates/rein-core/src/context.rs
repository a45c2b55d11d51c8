//! The call's context: one value, made once where a call enters rein (the gateway turns a
//! request's headers into it; a Rust agent builds it), that carries what every layer below needs
//! to know about the call: its [`Deadline`], the run and conversation it belongs to, the caller's
//! idempotency key, the degraded reply's variables, the evidence for the business rules and the
//! trace it is part of. It is passed first to `Engine::complete` / `Engine::stream`, to every
//! [`crate::validate::Rule`], the judge, webhook rules and the tool dispatcher. Nothing below the
//! edge makes a deadline of its own: each layer narrows the one it is given.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::clock::Deadline;
use crate::validate::Evidence;

/// Everything about one call that is not the request itself.
#[derive(Debug, Clone)]
pub struct CallContext {
    deadline: Deadline,
    /// The agent run this call belongs to (`x-rein-run-id`): the run's tool results join the
    /// evidence of its model calls.
    pub run_id: Option<String>,
    /// The conversation (`x-rein-conversation-id`), for `key_from = "conversation"` tools and
    /// hold records.
    pub conversation_id: Option<String>,
    /// The caller's idempotency key (`Idempotency-Key`); a write's key when the caller sets one.
    pub idempotency_key: Option<String>,
    /// Values for the degraded reply's template.
    pub vars: BTreeMap<String, String>,
    /// What rein saw in this run (tool results, documents the caller passed), for the business
    /// rules of the validation ladder.
    pub evidence: Evidence,
    /// The call's trace: the caller's (`traceparent`) or a new one, and rein's span in it. The
    /// edge sets it; a call without one is not traced.
    pub trace: Option<crate::trace::TraceIds>,
    /// The run is stopped, with this status (`stopped_repeated_call`, ...): the call gets the
    /// route's decided reply, and no provider is asked.
    pub run_stopped: Option<String>,
    /// rein's id for the request that made this call (`x-rein-request-id`).
    pub request_id: Option<String>,
    /// The caller's tags for the call (`x-rein-labels: question_type=delivery, locale=de`), for
    /// the slices the SLIs are broken down by.
    pub labels: BTreeMap<String, String>,
    /// The call was decided before any model was asked (a hand-off, a clarifying question):
    /// its reply, outcome and status.
    pub decided: Option<Box<Decided>>,
    /// The coverage check's verdict for this call, when one was made or known for its run
    /// (`false`: declined), for the call's SLI record.
    pub covered: Option<bool>,
    /// What the steps before the engine noted for the call's trace (a hand-off, the coverage
    /// check), timed since the call reached rein. Boxed, and only when there is a note: the
    /// context is moved along the request path, and most calls note nothing.
    pub notes: Option<Box<crate::trace::Notes>>,
    /// Only this tier of the route may answer (an eval of one tier, `rein eval --tier`): the
    /// others are passed over as if they were not in the route. The gateway allows it only
    /// with the admin key.
    pub pin_tier: Option<String>,
    /// The route's coverage check is not run for this call (an eval's, `rein eval --sweep
    /// coverage`, which scores coverage on its own and needs the answer the route gives whatever
    /// the score). The gateway allows it only with the admin key.
    pub skip_coverage: bool,
}

/// A call answered by a decision made before any model was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub outcome: crate::report::Outcome,
    /// What the response says happened (`handoff_rule:asks_for_person`, `coverage`, ...).
    pub status: String,
    pub reply: crate::degraded::DegradedReply,
}

/// The most labels one call may carry.
pub const MAX_LABELS: usize = 16;
/// The longest label key.
pub const MAX_LABEL_KEY: usize = 64;
/// The longest label value.
pub const MAX_LABEL_VALUE: usize = 128;

/// Whether `key` is a label key: 1 to 64 of `a-z`, `0-9`, `_`, `.`, `-`, starting with a letter.
pub fn is_label_key(key: &str) -> bool {
    key.len() <= MAX_LABEL_KEY
        && key.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c))
}

/// Whether `key = value` is a label a call may carry (the value's surrounding spaces aside);
/// the error says what is wrong, for the caller.
pub fn check_label(key: &str, value: &str) -> Result<(), String> {
    if !is_label_key(key) {
        return Err(format!(
            "label key `{key}` must be 1 to {MAX_LABEL_KEY} of a-z, 0-9, `_`, `.`, `-`, starting with a letter"
        ));
    }
    let value = value.trim();
    if value.is_empty()
        || value.len() > MAX_LABEL_VALUE
        || value.chars().any(|c| c.is_control() || c == '=' || c == ',')
    {
        return Err(format!(
            "label `{key}` needs a value of 1 to {MAX_LABEL_VALUE} printable characters, without `=` or `,`"
        ));
    }
    Ok(())
}

/// Labels as a caller writes them: `key=value` pairs separated by commas, spaces around them
/// ignored. The error says what is wrong, for the caller.
pub fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("`{pair}` is not `key=value`"));
        };
        let (key, value) = (key.trim(), value.trim());
        check_label(key, value)?;
        if labels.insert(key.to_string(), value.to_string()).is_some() {
            return Err(format!("label `{key}` is given twice"));
        }
        if labels.len() > MAX_LABELS {
            return Err(format!("at most {MAX_LABELS} labels per call"));
        }
    }
    Ok(labels)
}

impl Default for CallContext {
    fn default() -> Self {
        Self::new()
    }
}

impl CallContext {
    /// A context that starts now, with no deadline of the caller's (a model call then runs on its
    /// route's deadline; a tool call on its rungs' clocks).
    pub fn new() -> Self {
        Self {
            deadline: Deadline::unbounded(),
            run_id: None,
            conversation_id: None,
            idempotency_key: None,
            vars: BTreeMap::new(),
            evidence: Evidence::new(),
            trace: None,
            run_stopped: None,
            request_id: None,
            labels: BTreeMap::new(),
            decided: None,
            covered: None,
            notes: None,
            pin_tier: None,
            skip_coverage: false,
        }
    }

    /// A context whose call must be over `total` from now.
    pub fn with_deadline(total: Duration) -> Self {
        Self { deadline: Deadline::after(total), ..Self::new() }
    }

    /// The same context with this evidence (builder form).
    #[must_use]
    pub fn evidence(mut self, evidence: Evidence) -> Self {
        self.evidence = evidence;
        self
    }

    /// The same context with this degraded-reply variable (builder form).
    #[must_use]
    pub fn var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    /// The same context in this conversation (builder form).
    #[must_use]
    pub fn conversation(mut self, id: impl Into<String>) -> Self {
        self.conversation_id = Some(id.into());
        self
    }

    /// The same context with the caller's idempotency key (builder form).
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The notes for the call's trace, made on the first note.
    pub fn notes_mut(&mut self) -> &mut crate::trace::Notes {
        self.notes.get_or_insert_with(Box::default)
    }

    /// The call's deadline.
    pub fn deadline(&self) -> &Deadline {
        &self.deadline
    }

    /// Bring the deadline in to `total` from now, when that is sooner (a route's own deadline).
    pub fn narrow(&mut self, total: Duration) {
        self.deadline = self.deadline.within(total);
    }

    /// The context of a call made on this call's behalf (a judge's): the same deadline, run,
    /// conversation and trace; none of the caller's evidence, variables or key, which belong to
    /// the call it serves.
    pub fn child(&self) -> Self {
        Self {
            deadline: self.deadline,
            run_id: self.run_id.clone(),
            conversation_id: self.conversation_id.clone(),
            idempotency_key: None,
            vars: BTreeMap::new(),
            evidence: Evidence::new(),
            trace: self.trace.clone(),
            run_stopped: None,
            request_id: self.request_id.clone(),
            labels: self.labels.clone(),
            decided: None,
            covered: None,
            notes: None,
            pin_tier: None,
            skip_coverage: false,
        }
    }
}

/// A W3C Trace Context parent (`traceparent: 00-<trace id>-<parent id>-<flags>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: String,
    /// 16 lowercase hex digits, not all zero: the caller's span.
    pub parent_id: String,
    /// The caller sampled this trace.
    pub sampled: bool,
}

impl TraceParent {
    /// Parse a `traceparent` header value; `None` for one that breaks the format (the W3C rule:
    /// an invalid parent is ignored, not an error).
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.trim().split('-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
        // Version ff is forbidden; version 00 has exactly four fields.
        if !hex(version, 2) || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        if !hex(trace_id, 32) || !nonzero(trace_id) || !hex(parent_id, 16) || !nonzero(parent_id) {
            return None;
        }
        if !hex(flags, 2) {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(Self {
            trace_id: trace_id.to_string(),
            parent_id: parent_id.to_string(),
            sampled: flags & 1 == 1,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::validate::EvidenceItem;

    #[tokio::test(start_paused = true)]
    async fn a_child_shares_the_deadline_and_not_the_evidence() {
        let mut ctx = CallContext::with_deadline(Duration::from_secs(2))
            .evidence(Evidence::new().with(EvidenceItem::new("search", "140", "text")))
            .var("name", "Ada")
            .idempotency_key("k1")
            .conversation("c1");
        tokio::time::sleep(Duration::from_millis(500)).await;
        ctx.narrow(Duration::from_secs(20));
        let child = ctx.child();
        assert_eq!(child.deadline(), ctx.deadline());
        assert_eq!(child.deadline().remaining(), Duration::from_millis(1500));
        assert_eq!(child.conversation_id.as_deref(), Some("c1"));
        assert!(child.evidence.is_empty());
        assert!(child.vars.is_empty());
        assert_eq!(child.idempotency_key, None);
    }

    #[test]
    fn traceparent_follows_the_w3c_format() {
        let parent =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(parent.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.parent_id, "00f067aa0ba902b7");
        assert!(parent.sampled);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        // A later version may carry more fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x")
                .is_some_and(|p| !p.sampled)
        );
    }
}
