//! What the edge reads of every call before a handler sees it, for model calls and tool calls
//! alike ([`admit`]): the request id, the client key, the call's context from its headers, a
//! JSON content type and the whole body within its bounds.
//!
//! The context is the one place the gateway reads `x-rein-deadline-ms`, `x-rein-run-id`,
//! `x-rein-conversation-id`, `Idempotency-Key` and `traceparent`. It is made as soon as the
//! caller is let in, so the caller's deadline counts from the request's arrival (the body's upload
//! included), and nothing below the edge makes a deadline of its own.
//!
//! The body is read within `server.max_body_bytes` and `server.body_read_timeout_ms`. A body over
//! the limit is drained (up to [`DRAIN_BYTES`], within [`DRAIN_TIME`]) before the 413 goes out, so
//! a client still sending sees the status instead of a broken pipe; the 413 closes the connection.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use rand::RngExt;
use rein_core::{CallContext, TraceParent};
use rein_runtime::Snapshot;
use rein_runtime::config::{Secret, ServerConfig};
use subtle::ConstantTimeEq;

/// Why the edge turned a call away before its handler; each handler answers in its caller's
/// format.
#[derive(Debug)]
pub(super) enum Refusal {
    /// No valid client key.
    Unauthorized,
    /// A context header the caller got wrong.
    Header(HeaderProblem),
    /// The body is not declared as JSON: what the caller is told.
    MediaType(String),
    /// The body could not be read within its bounds.
    Body(BodyError),
}

/// A call the edge let in: its context and its whole body.
#[derive(Debug)]
pub(super) struct Admitted {
    pub ctx: CallContext,
    pub body: Bytes,
}

/// Let a call in, or say why not: the client key, the context headers, a JSON content type and
/// the body read within `runtime`'s bounds, in that order. The request id comes back either way,
/// for the answer or the error.
pub(super) async fn admit(
    runtime: &Snapshot,
    headers: &HeaderMap,
    body: Body,
) -> (String, Result<Admitted, Refusal>) {
    let request_id = new_id("req_");
    let admitted = admitted(runtime, headers, body).await.map(|mut call| {
        call.ctx.request_id = Some(request_id.clone());
        call
    });
    (request_id, admitted)
}

async fn admitted(
    runtime: &Snapshot,
    headers: &HeaderMap,
    body: Body,
) -> Result<Admitted, Refusal> {
    if !client_allowed(runtime, headers) {
        return Err(Refusal::Unauthorized);
    }
    let ctx = call_context(headers).map_err(Refusal::Header)?;
    let content_type =
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.to_ascii_lowercase().starts_with("application/json") {
        let shown = if content_type.is_empty() { "none" } else { content_type };
        return Err(Refusal::MediaType(format!(
            "Content-Type must be application/json (got {shown})"
        )));
    }
    let body = read_request(body, headers, &runtime.config.server).await.map_err(Refusal::Body)?;
    Ok(Admitted { ctx, body })
}

/// Whether the request carries a valid client key (always, when none are configured: rein
/// then only listens on loopback, which config validation enforces).
pub fn client_allowed(snapshot: &Snapshot, headers: &HeaderMap) -> bool {
    let keys = &snapshot.config.server.client_keys;
    keys.is_empty()
        || presented(headers).iter().any(|given| keys.iter().any(|key| same(key, given)))
}

/// Whether the request carries the admin key: as a bearer token, as `x-api-key`, or as the
/// password of HTTP Basic credentials (any user name), which is what a browser sends for the
/// dashboard and the admin links on it. No admin key configured: the admin API is off.
pub fn admin_allowed(snapshot: &Snapshot, headers: &HeaderMap) -> bool {
    match &snapshot.config.server.admin_key {
        Some(key) => carries(key, headers),
        None => false,
    }
}

/// Whether the call carries the admin key in `x-rein-admin-key` (its `Authorization` holds the
/// client key). No admin key configured: never.
pub(super) fn admin_key_beside(snapshot: &Snapshot, headers: &HeaderMap) -> bool {
    let given = headers.get(ADMIN_KEY_HEADER).and_then(|value| value.to_str().ok());
    match (&snapshot.config.server.admin_key, given) {
        (Some(key), Some(given)) => same(key, given.trim()),
        _ => false,
    }
}

/// Whether `headers` present `key` in any of the ways [`admin_allowed`] takes.
fn carries(key: &Secret, headers: &HeaderMap) -> bool {
    presented(headers).iter().any(|given| same(key, given))
        || basic_password(headers).is_some_and(|given| same(key, &given))
}

/// The password of `Authorization: Basic <base64 of user:password>` (RFC 7617); `None` when
/// the header is absent, another scheme, not base64, not UTF-8 or without the colon.
fn basic_password(headers: &HeaderMap) -> Option<String> {
    use base64::Engine as _;
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_user, password) = text.split_once(':')?;
    Some(password.to_string())
}

/// Keys presented as `Authorization: Bearer <key>` or `x-api-key: <key>`.
fn presented(headers: &HeaderMap) -> Vec<&str> {
    let mut keys = Vec::new();
    if let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())
        && let Some(token) = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))
    {
        keys.push(token.trim());
    }
    if let Some(value) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        keys.push(value.trim());
    }
    keys
}

fn same(key: &Secret, given: &str) -> bool {
    key.expose().as_bytes().ct_eq(given.as_bytes()).into()
}

/// A fresh random id with a prefix (`req_`, `chatcmpl-`, `msg_`).
pub fn new_id(prefix: &str) -> String {
    let value: u128 = rand::rng().random();
    let mut id = String::with_capacity(prefix.len() + 32);
    id.push_str(prefix);
    rein_core::trace::push_hex(&mut id, value, 32);
    id
}

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
/// The caller's tags for the call: `key=value` pairs, comma-separated.
pub(super) const LABELS_HEADER: &str = "x-rein-labels";
/// The one tier of the route that may answer the call (an eval of that tier).
pub(super) const PIN_TIER_HEADER: &str = "x-rein-pin-tier";
/// `true`: the route's coverage check is not run for the call (an eval's coverage sweep).
pub(super) const SKIP_COVERAGE_HEADER: &str = "x-rein-skip-coverage";
/// The admin key, beside the client key, for what only an operator may ask of a call.
pub(super) const ADMIN_KEY_HEADER: &str = "x-rein-admin-key";

/// The context headers a request carries, found in one pass over its headers: a request has a
/// handful, where looking each of the eight names up hashed each name (~1.2k instructions a
/// call). A repeated header's first value counts, as a lookup finds it.
#[derive(Default)]
struct ContextHeaders<'a> {
    deadline: Option<&'a HeaderValue>,
    run: Option<&'a HeaderValue>,
    conversation: Option<&'a HeaderValue>,
    idempotency: Option<&'a HeaderValue>,
    traceparent: Option<&'a HeaderValue>,
    labels: Option<&'a HeaderValue>,
    pin_tier: Option<&'a HeaderValue>,
    skip_coverage: Option<&'a HeaderValue>,
}

impl<'a> ContextHeaders<'a> {
    fn of(headers: &'a HeaderMap) -> Self {
        let mut found = Self::default();
        for (name, value) in headers {
            let slot = match name.as_str() {
                DEADLINE_HEADER => &mut found.deadline,
                RUN_HEADER => &mut found.run,
                CONVERSATION_HEADER => &mut found.conversation,
                IDEMPOTENCY_HEADER => &mut found.idempotency,
                TRACEPARENT_HEADER => &mut found.traceparent,
                LABELS_HEADER => &mut found.labels,
                PIN_TIER_HEADER => &mut found.pin_tier,
                SKIP_COVERAGE_HEADER => &mut found.skip_coverage,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        found
    }
}

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
    let found = ContextHeaders::of(headers);
    let mut ctx = match text(found.deadline, DEADLINE_HEADER)? {
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
    ctx.run_id = text(found.run, RUN_HEADER)?.map(str::to_string);
    ctx.conversation_id = text(found.conversation, CONVERSATION_HEADER)?.map(str::to_string);
    ctx.pin_tier = text(found.pin_tier, PIN_TIER_HEADER)?.map(|tier| tier.trim().to_string());
    ctx.idempotency_key = text(found.idempotency, IDEMPOTENCY_HEADER)?.map(str::to_string);
    ctx.skip_coverage = match text(found.skip_coverage, SKIP_COVERAGE_HEADER)?.map(str::trim) {
        None => false,
        Some(value) if value.eq_ignore_ascii_case("true") => true,
        Some(value) if value.eq_ignore_ascii_case("false") => false,
        Some(_) => {
            return Err(HeaderProblem {
                header: SKIP_COVERAGE_HEADER,
                message: format!("Header `{SKIP_COVERAGE_HEADER}` must be `true` or `false`."),
            });
        }
    };
    for (var, value) in [
        ("run_id", &ctx.run_id),
        ("conversation_id", &ctx.conversation_id),
        ("idempotency_key", &ctx.idempotency_key),
    ] {
        if let Some(value) = value {
            ctx.vars.insert(var.to_string(), value.clone());
        }
    }
    if let Some(text) = text(found.labels, LABELS_HEADER)? {
        ctx.labels = rein_core::context::parse_labels(text).map_err(|why| HeaderProblem {
            header: LABELS_HEADER,
            message: format!("Header `{LABELS_HEADER}`: {why}."),
        })?;
    }
    let parent =
        found.traceparent.and_then(|value| value.to_str().ok()).and_then(TraceParent::parse);
    ctx.trace = Some(rein_core::trace::TraceIds::for_call(parent.as_ref()));
    Ok(ctx)
}

/// A context header's value as text, if it came.
fn text<'a>(
    value: Option<&'a HeaderValue>,
    name: &'static str,
) -> Result<Option<&'a str>, HeaderProblem> {
    match value {
        None => Ok(None),
        Some(value) => value.to_str().map(Some).map_err(|_| HeaderProblem {
            header: name,
            message: format!("Header `{name}` must be printable ASCII text."),
        }),
    }
}

/// How much of an oversize body is read and dropped so that the client sees the 413.
pub(super) const DRAIN_BYTES: usize = 64 * 1024 * 1024;
/// How long draining may take at most.
pub(super) const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Why a body could not be read.
#[derive(Debug)]
pub(super) enum BodyError {
    /// Longer than the limit (declared or sent).
    TooLarge,
    /// Not all sent within the read timeout.
    Timeout,
    /// The client's stream broke (reset, malformed chunking).
    Broken(String),
}

impl BodyError {
    /// 413 over the limit, 408 past the clock, 400 for a broken stream.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyError::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// What the caller is told, naming the setting that bounds it.
    pub(super) fn message(&self, server: &ServerConfig) -> String {
        match self {
            BodyError::TooLarge => format!(
                "The request body is larger than this gateway accepts ({} bytes, `server.max_body_bytes`).",
                server.max_body_bytes
            ),
            BodyError::Timeout => format!(
                "The request body did not arrive within {} ms (`server.body_read_timeout_ms`).",
                server.edge.body_read_timeout.as_millis()
            ),
            BodyError::Broken(why) => format!("The request body could not be read: {why}."),
        }
    }
}

/// The whole body of a request with these `headers`, within `server`'s limit and clock.
pub(super) async fn read_request(
    body: Body,
    headers: &HeaderMap,
    server: &ServerConfig,
) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    read(body, declared, server.max_body_bytes, server.edge.body_read_timeout).await
}

/// The whole body, or why not. `declared` is the request's `Content-Length`, if any.
async fn read(
    body: Body,
    declared: Option<usize>,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, BodyError> {
    if declared.is_some_and(|length| length > limit) {
        drain(body).await;
        return Err(BodyError::TooLarge);
    }
    let mut body = body;
    let collected = tokio::time::timeout(timeout, async {
        // A body that comes in one frame (the common case) is kept as it is, not copied.
        let mut first: Option<Bytes> = None;
        let mut joined = bytes::BytesMut::new();
        loop {
            match body.frame().await {
                None => {
                    return Ok(match first {
                        Some(only) if joined.is_empty() => only,
                        _ => joined.freeze(),
                    });
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let held = first.as_ref().map_or(0, Bytes::len) + joined.len();
                        if held + data.len() > limit {
                            return Err(BodyError::TooLarge);
                        }
                        match first.take() {
                            None if joined.is_empty() => first = Some(data),
                            earlier => {
                                if let Some(earlier) = earlier {
                                    joined.extend_from_slice(&earlier);
                                }
                                joined.extend_from_slice(&data);
                            }
                        }
                    }
                }
                Some(Err(error)) => {
                    let error = error.into_inner();
                    let timed_out = error
                        .downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
                    return Err(if timed_out {
                        BodyError::Timeout
                    } else {
                        BodyError::Broken(error.to_string())
                    });
                }
            }
        }
    })
    .await;
    match collected {
        Ok(Err(BodyError::TooLarge)) => {
            drain(body).await;
            Err(BodyError::TooLarge)
        }
        Ok(result) => result,
        Err(_) => Err(BodyError::Timeout),
    }
}

/// Read and drop what the client still sends, within [`DRAIN_BYTES`] and [`DRAIN_TIME`].
async fn drain(mut body: Body) {
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut drained = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                drained += data.len();
                if drained >= DRAIN_BYTES {
                    return;
                }
            }
        }
    })
    .await;
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
        let mut all = headers(&[
            ("host", b"rein"),
            (DEADLINE_HEADER, b"2500"),
            (RUN_HEADER, b"run-1"),
            ("authorization", b"Bearer k"),
            (CONVERSATION_HEADER, b"c-1"),
            (IDEMPOTENCY_HEADER, b"k-1"),
            (TRACEPARENT_HEADER, b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            (LABELS_HEADER, b"team=support"),
            (PIN_TIER_HEADER, b" fallback "),
            (SKIP_COVERAGE_HEADER, b"true"),
        ]);
        // A repeated header counts once, by its first value.
        all.append(RUN_HEADER, HeaderValue::from_static("run-2"));
        all.append(CONVERSATION_HEADER, HeaderValue::from_static("c-2"));
        let ctx = call_context(&all).unwrap();
        assert_eq!(ctx.labels.get("team").map(String::as_str), Some("support"));
        assert_eq!((ctx.pin_tier.as_deref(), ctx.skip_coverage), (Some("fallback"), true));
        assert_eq!(ctx.deadline().remaining(), Duration::from_millis(2500));
        assert_eq!(
            (ctx.run_id.as_deref(), ctx.conversation_id.as_deref(), ctx.idempotency_key.as_deref()),
            (Some("run-1"), Some("c-1"), Some("k-1"))
        );
        assert_eq!(ctx.vars.get("conversation_id").map(String::as_str), Some("c-1"));
        let trace = ctx.trace.unwrap();
        assert_eq!(trace.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace.parent_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_ne!(trace.span_id, "00f067aa0ba902b7");

        // Without a parent, the call starts a trace of its own.
        let none = call_context(&HeaderMap::new()).unwrap();
        assert!(!none.deadline().is_bounded());
        assert!(none.vars.is_empty());
        let own = none.trace.unwrap();
        assert_eq!((own.trace_id.len(), own.span_id.len(), own.parent_id), (32, 16, None));
        // A broken traceparent is ignored, not an error: a new trace, with no parent.
        let broken = call_context(&headers(&[(TRACEPARENT_HEADER, b"00-zz")])).unwrap();
        assert_eq!(broken.trace.unwrap().parent_id, None);
    }

    fn basic(credentials: &[u8]) -> HeaderMap {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
        headers(&[("authorization", format!("Basic {encoded}").as_bytes())])
    }

    #[test]
    fn basic_credentials_give_their_password() {
        assert_eq!(basic_password(&basic(b"admin:s3cret")).as_deref(), Some("s3cret"));
        // Any user name, an empty one too; the password may hold colons.
        assert_eq!(basic_password(&basic(b":a:b")).as_deref(), Some("a:b"));
        // The scheme is case-insensitive.
        let lower = headers(&[("authorization", b"basic YWRtaW46czNjcmV0")]);
        assert_eq!(basic_password(&lower).as_deref(), Some("s3cret"));
        // No colon, malformed base64, not UTF-8, another scheme, no header: no password.
        assert_eq!(basic_password(&basic(b"admin-s3cret")), None);
        assert_eq!(basic_password(&headers(&[("authorization", b"Basic !!not-base64!!")])), None);
        assert_eq!(
            basic_password(&headers(&[("authorization", b"Basic YWRtaW46czNjcmV0=")])),
            None
        );
        assert_eq!(basic_password(&basic(b"admin:\xff")), None);
        assert_eq!(basic_password(&headers(&[("authorization", b"Bearer s3cret")])), None);
        assert_eq!(basic_password(&HeaderMap::new()), None);
    }

    #[test]
    fn the_admin_key_is_accepted_as_the_basic_password_only_when_it_is_right() {
        let key = Secret::new("admin-key-1");
        assert!(carries(&key, &basic(b"anyone:admin-key-1")));
        assert!(carries(&key, &basic(b":admin-key-1")));
        assert!(carries(&key, &headers(&[("authorization", b"Bearer admin-key-1")])));
        assert!(carries(&key, &headers(&[("x-api-key", b"admin-key-1")])));
        assert!(!carries(&key, &basic(b"anyone:admin-key-2")), "wrong password");
        assert!(!carries(&key, &basic(b"anyone:admin-key-")), "a prefix of the key");
        assert!(!carries(&key, &basic(b"admin-key-1:")), "the key as the user name");
        assert!(!carries(&key, &basic(b"admin-key-1")), "no colon");
        assert!(!carries(&key, &HeaderMap::new()));
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
