//! What one tool call did, for its trace: a span per rung that ran (its kind, fidelity, how it
//! ended and why), and events for what decided the call without a rung (a rung skipped by its
//! breaker or the deadline, a gate that held the write, the duplicate guard, a stored result
//! returned for a repeated key). Timed since the call's context started (the gateway's intake),
//! collected as the ladder walks and handed back in [`crate::ToolOutcome::trace`]; the gateway
//! puts it under the call's root span. Nothing here holds arguments or results.

use std::sync::Mutex;

use rein_core::Deadline;
use rein_core::trace::{Notes, SpanEvent, SpanKind};

use crate::ladder::{Rung, RungAction};

/// How a rung's turn ended, as `rein.disposition` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// It served the call.
    Served,
    /// It answered for good with a refusal (the backend rejected the arguments).
    Refused,
    /// Its bulkhead was full: `busy`, the ladder does not advance.
    Busy,
    /// It failed; the walk stepped down.
    Down,
    /// It declined (a cache with nothing fresh enough): the walk stepped down.
    Declined,
    /// It put the write in the outbox.
    Queued,
    /// The write was held for a person to review.
    Review,
}

impl Turn {
    fn as_str(self) -> &'static str {
        match self {
            Turn::Served => "served",
            Turn::Refused => "refused",
            Turn::Busy => "busy",
            Turn::Down => "down",
            Turn::Declined => "declined",
            Turn::Queued => "queued",
            Turn::Review => "review",
        }
    }
}

/// The trace notes of one tool call, written as its ladder is walked.
#[derive(Debug)]
pub(crate) struct RungLog {
    deadline: Deadline,
    notes: Mutex<Notes>,
}

impl RungLog {
    pub(crate) fn new(deadline: &Deadline) -> Self {
        Self { deadline: *deadline, notes: Mutex::new(Notes::default()) }
    }

    /// Milliseconds since the call started.
    pub(crate) fn now_ms(&self) -> u64 {
        self.deadline.elapsed_ms()
    }

    /// `rung`'s turn, from `start_ms` until now: how it ended, why, and the HTTP status when
    /// there was one.
    pub(crate) fn rung(
        &self,
        rung: &Rung,
        start_ms: u64,
        turn: Turn,
        reason: Option<&str>,
        status: Option<u16>,
    ) {
        let end_ms = self.now_ms();
        let (kind, span_kind) = match &rung.action {
            RungAction::Http(_) => ("http", SpanKind::Client),
            RungAction::Mcp(_) => ("mcp", SpanKind::Client),
            RungAction::Cache { .. } => ("cache", SpanKind::Internal),
            RungAction::Static { .. } => ("static", SpanKind::Internal),
            RungAction::Queue => ("queue", SpanKind::Internal),
        };
        let Ok(mut notes) = self.notes.lock() else { return };
        let span = notes.span(&format!("rung {}", rung.source), span_kind, start_ms, end_ms);
        let attrs = &mut span.attributes;
        attrs.insert("rein.rung".into(), rung.source.clone().into());
        attrs.insert("rein.rung.index".into(), rung.index.into());
        attrs.insert("rein.rung.kind".into(), kind.into());
        attrs.insert("rein.fidelity".into(), rung.fidelity.as_str().into());
        attrs.insert("rein.disposition".into(), turn.as_str().into());
        if let Some(reason) = reason {
            attrs.insert("rein.reason".into(), reason.into());
        }
        if let Some(status) = status {
            attrs.insert("http.response.status_code".into(), u32::from(status).into());
        }
        if turn == Turn::Down {
            attrs.insert("error.type".into(), reason.unwrap_or("failed").into());
            span.error = Some(reason.unwrap_or("failed").to_string());
        }
    }

    /// `rung` was passed over without running (`breaker_open`, `no_time_left`).
    pub(crate) fn skipped(&self, rung: &Rung, reason: &str) {
        let event = SpanEvent::new("rung_skipped", self.now_ms())
            .with("rein.rung", rung.source.as_str())
            .with("rein.reason", reason);
        self.event(event);
    }

    /// Something that decided the call at this moment.
    pub(crate) fn event(&self, event: SpanEvent) {
        if let Ok(mut notes) = self.notes.lock() {
            notes.events.push(event);
        }
    }

    /// What was noted, leaving nothing.
    pub(crate) fn take(&self) -> Notes {
        self.notes.lock().map(|mut notes| std::mem::take(&mut *notes)).unwrap_or_default()
    }
}

/// What an http rung's failure was, for `rein.reason`, and its status when it had one, read
/// from the reason `http::send` gives (which may quote the backend, and is never put on a
/// trace).
pub(crate) fn failure(reason: &str) -> (&'static str, Option<u16>) {
    let status_after = |prefix: &str| {
        reason.strip_prefix(prefix).and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u16>().ok()
        })
    };
    if let Some(status) = status_after("status ") {
        let why = if reason.contains("body cut off") {
            "body_cut_off"
        } else if reason.contains("max_response_bytes") {
            "too_large"
        } else {
            "status"
        };
        return (why, Some(status));
    }
    if let Some(status) = status_after("unexpected status ") {
        return ("unexpected_status", Some(status));
    }
    ("connection", None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::http::{HttpOutcome, classify};
    use crate::redact::Redactor;

    fn reason_of(status: u16, body: &[u8]) -> String {
        match classify(status, body, &Redactor::default()) {
            HttpOutcome::Failed { reason, .. } => reason,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failures_reason_and_status_are_read_from_what_send_says() {
        let quoted = reason_of(503, br#"{"error": {"message": "token sk-live-123 refused"}}"#);
        assert_eq!(failure(&quoted), ("status", Some(503)));
        assert_eq!(failure(&reason_of(500, b"")), ("status", Some(500)));
        assert_eq!(failure(&reason_of(302, b"")), ("unexpected_status", Some(302)));
        assert_eq!(failure("status 200, body cut off: reset"), ("body_cut_off", Some(200)));
        let large = "status 200, body larger than max_response_bytes (10 bytes): stopped reading";
        assert_eq!(failure(large), ("too_large", Some(200)));
        assert_eq!(failure("error sending request: connection refused"), ("connection", None));
    }
}
