//! The duplicate guard: what stands between a write whose earlier send's outcome is unknown (it
//! may have executed) and sending it again. Each write tool declares one (`idempotency`):
//! `"key"` trusts the backend to deduplicate by `Idempotency-Key`; `"lookup"` runs the tool's
//! lookup request first and records a result found there as the write's, sending nothing;
//! `"none"` (the default) lets nothing be sent on its own: the write is held for a person.
//! The live ladder and the replay worker both ask here before every such resend.

use std::time::Duration;

use serde_json::Value;

use crate::config::Idempotency;
use crate::dispatcher::Dispatcher;
use crate::http::{self, HttpOutcome};
use crate::ladder::{Lookup, Tool};

/// What the guard allows before a resend of an unknown outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Guard {
    /// Send (again, with the same key).
    Send,
    /// The write had executed: this is its result. Send nothing.
    Found(Value),
    /// The tool cannot prove a resend safe right now (a lookup that failed): send nothing, try
    /// again later.
    Wait(String),
    /// Only a person can tell (`idempotency = "none"`): hold it for review.
    Review,
}

/// The write a guard is asked about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write<'a> {
    pub key: &'a str,
    pub args: &'a Value,
    pub conversation_id: Option<&'a str>,
}

/// Whether `write` of `tool` may be sent again after an unknown outcome, within `budget`.
pub(crate) async fn duplicate_guard(
    dispatcher: &Dispatcher,
    tool: &Tool,
    write: Write<'_>,
    budget: Duration,
) -> Guard {
    match (tool.idempotency, &tool.lookup) {
        (Idempotency::Key, _) => Guard::Send,
        (Idempotency::Review, _) => Guard::Review,
        (Idempotency::Lookup, Some(lookup)) => {
            run_lookup(dispatcher, tool, lookup, write, budget).await
        }
        // Validation gives every lookup tool its lookup; a config without one proves nothing.
        (Idempotency::Lookup, None) => Guard::Review,
    }
}

/// Ask the tool's lookup whether the write already executed.
async fn run_lookup(
    dispatcher: &Dispatcher,
    tool: &Tool,
    lookup: &Lookup,
    write: Write<'_>,
    budget: Duration,
) -> Guard {
    let url = match lookup_url(lookup, write) {
        Ok(url) => url,
        Err(problem) => return Guard::Wait(format!("lookup not possible: {problem}")),
    };
    let Some(_slot) = lookup.http.bulkhead.try_enter() else {
        return Guard::Wait(format!("lookup bulkhead `{}` is full", lookup.http.bulkhead.name));
    };
    let budget = budget.min(lookup.timeout);
    let sent = http::send(
        &dispatcher.http,
        &lookup.http,
        &url,
        write.args,
        None,
        budget,
        &dispatcher.plan.redactor,
    );
    let found = match sent.await {
        HttpOutcome::Answered(answer) => {
            let at = if lookup.found_at.is_empty() {
                Some(&answer)
            } else {
                answer.pointer(&lookup.found_at)
            };
            at.filter(|value| !is_empty(value)).cloned()
        }
        HttpOutcome::Rejected { status: 404, .. } => None,
        HttpOutcome::Rejected { status, message }
        | HttpOutcome::Unauthorized { status, message } => {
            return Guard::Wait(format!("lookup answered status {status}: {message}"));
        }
        HttpOutcome::Unparseable { .. } => {
            return Guard::Wait("lookup answered a body that is not JSON".into());
        }
        HttpOutcome::Failed { reason, .. } => {
            return Guard::Wait(format!("lookup failed: {reason}"));
        }
        HttpOutcome::TimedOut => {
            return Guard::Wait(format!("lookup timed out after {} ms", budget.as_millis()));
        }
    };
    match found {
        Some(result) => {
            tracing::info!(tool = %tool.name, "lookup found the earlier execution; not sending again");
            Guard::Found(result)
        }
        None => Guard::Send,
    }
}

/// The lookup's URL for `write`: its arguments, with `{idempotency_key}` and
/// `{conversation_id}` from the write.
pub(crate) fn lookup_url(lookup: &Lookup, write: Write<'_>) -> Result<String, String> {
    let mut context = vec![("idempotency_key", write.key)];
    if let Some(conversation) = write.conversation_id.filter(|c| !c.is_empty()) {
        context.push(("conversation_id", conversation));
    }
    lookup.http.url.fill_with(write.args, &context).map_err(|problem| problem.message)
}

/// Nothing found: `null`, `[]`, `{}` or `""`.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        Value::String(text) => text.is_empty(),
        Value::Bool(_) | Value::Number(_) => false,
    }
}
