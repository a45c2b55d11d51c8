//! The call's context from its request headers: the one place the gateway reads
//! `x-rein-deadline-ms`, `x-rein-run-id`, `x-rein-conversation-id`, `Idempotency-Key` and
//! `traceparent`, for model calls and tool calls alike. The context is made as soon as the caller
//! is let in, so the caller's deadline counts from the request's arrival (the body's upload
//! included), and nothing below the edge makes a deadline of its own.

use std::time::Duration;

use axum::http::HeaderMap;
use rein_core::{CallContext, TraceParent};

/// The caller's deadline for the whole call, in milliseconds.
pub const DEADLINE_HEADER: &str = "x-rein-deadline-ms";
/// The agent run the call belongs to.
pub const RUN_HEADER: &str = "x-rein-run-id";
/// The conversation the call belongs to.
pub const CONVERSATION_HEADER: &str = "x-rein-conversation-id";
/// The caller's idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// The W3C trace the call is part of.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// A context header the caller got wrong: which one, and what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HeaderProblem {
    pub header: &'static str,
    pub message: String,
}

/// The context of a call from its headers. A header that is present but not text is an error,
/// never skipped: skipping an idempotency key would mint a fresh one, so each retry of a write
/// would execute again. The run, conversation and key are also the degraded reply's variables
/// (`run_id`, `conversation_id`, `idempotency_key`). A `traceparent` that breaks the W3C format
/// is ignored, as that format says.
pub(super) fn call_context(headers: &HeaderMap) -> Result<CallContext, HeaderProblem> {
    let mut ctx = match text(headers, DEADLINE_HEADER)? {
        None => CallContext::new(),
        Some(value) => match value.trim().parse::<u64>().ok().filter(|ms| *ms > 0) {
            Some(ms) => CallContext::with_deadline(Duration::from_millis(ms)),
            None => {
                return Err(HeaderProblem {
                    header: DEADLINE_HEADER,
                    message: format!(
                        "Header `{DEADLINE_HEADER}` must be a positive whole number of milliseconds."
                    ),
                });
            }
        },
    };
    ctx.run_id = text(headers, RUN_HEADER)?.map(str::to_string);
    ctx.conversation_id = text(headers, CONVERSATION_HEADER)?.map(str::to_string);
    ctx.idempotency_key = text(headers, IDEMPOTENCY_HEADER)?.map(str::to_string);
    for (var, value) in [
        ("run_id", &ctx.run_id),
        ("conversation_id", &ctx.conversation_id),
        ("idempotency_key", &ctx.idempotency_key),
    ] {
        if let Some(value) = value {
            ctx.vars.insert(var.to_string(), value.clone());
        }
    }
    ctx.trace = headers
        .get(TRACEPARENT_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(TraceParent::parse);
    Ok(ctx)
}

fn text<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<Option<&'a str>, HeaderProblem> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value.to_str().map(Some).map_err(|_| HeaderProblem {
            header: name,
            message: format!("Header `{name}` must be printable ASCII text."),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_bytes(value).unwrap());
        }
        map
    }

    #[tokio::test(start_paused = true)]
    async fn every_context_header_lands_in_the_context() {
        let ctx = call_context(&headers(&[
            (DEADLINE_HEADER, b"2500"),
            (RUN_HEADER, b"run-1"),
            (CONVERSATION_HEADER, b"c-1"),
            (IDEMPOTENCY_HEADER, b"k-1"),
            (TRACEPARENT_HEADER, b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ]))
        .unwrap();
        assert_eq!(ctx.deadline().remaining(), Duration::from_millis(2500));
        assert_eq!(
            (ctx.run_id.as_deref(), ctx.conversation_id.as_deref(), ctx.idempotency_key.as_deref()),
            (Some("run-1"), Some("c-1"), Some("k-1"))
        );
        assert_eq!(ctx.vars.get("conversation_id").map(String::as_str), Some("c-1"));
        assert_eq!(ctx.trace.unwrap().parent_id, "00f067aa0ba902b7");

        let none = call_context(&HeaderMap::new()).unwrap();
        assert!(!none.deadline().is_bounded());
        assert!(none.vars.is_empty() && none.trace.is_none());
        // A broken traceparent is ignored, not an error.
        let broken = call_context(&headers(&[(TRACEPARENT_HEADER, b"00-zz")])).unwrap();
        assert!(broken.trace.is_none());
    }

    #[test]
    fn a_bad_header_is_named() {
        for value in [&b"0"[..], b"-5", b"soon", b"1.5"] {
            let problem = call_context(&headers(&[(DEADLINE_HEADER, value)])).unwrap_err();
            assert_eq!(problem.header, DEADLINE_HEADER);
            assert!(problem.message.contains("positive whole number"), "{}", problem.message);
        }
        for name in [IDEMPOTENCY_HEADER, CONVERSATION_HEADER, RUN_HEADER] {
            let problem = call_context(&headers(&[(name, b"caf\xc3\xa9")])).unwrap_err();
            assert_eq!(problem.header, name);
            assert!(problem.message.contains("printable ASCII"), "{}", problem.message);
        }
    }
}
