//! The model-call endpoints: `POST /v1/chat/completions` (OpenAI), `POST /v1/responses`
//! (OpenAI Responses) and `POST /v1/messages` (Anthropic). All run the same path: auth → content type → body limit → parse (errors name
//! the field) → per-request context from headers and the body's `rein` object (the caller's
//! evidence for the route's business rules) → the engine → the answer in the caller's format,
//! with response headers that say what happened (outcome, tier, attempts, re-asks, repairs).

use std::borrow::Cow;

use std::future::Future;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use rein_core::validate::Evidence;
use rein_core::{CallContext, CallReport, ChatRequest, ReleaseMode, ReleaseStream, Released};

use super::Gateway;
use super::error::{Api, ApiError};
use super::intake::{self, Admitted, BodyError, Refusal};
use super::record::Recording;
use super::run::{self, Followup};
use crate::wire::{self, ErrorKind, ResponseMeta};
use rein_runtime::config::ServerConfig;

/// The model-call endpoints, each path with the API it speaks: the one table both ways in
/// read. The edge hands a `POST` to one of them to [`serve`] itself, without the router (its
/// path match, extensions and boxed service cost ~3k instructions a call); the router routes
/// the same paths to [`serve`] for everything else it answers about them (a `GET` is a 405
/// there) and for those who serve the router alone.
pub(super) const ENDPOINTS: [(&str, Api); 3] = [
    ("/v1/chat/completions", Api::OpenAi),
    ("/v1/responses", Api::Responses),
    ("/v1/messages", Api::Anthropic),
];

/// The model-call endpoint a `POST` to `path` reaches.
pub(super) fn endpoint(path: &str) -> Option<Api> {
    ENDPOINTS.iter().find(|(endpoint, _)| *endpoint == path).map(|&(_, api)| api)
}

/// A model call to the endpoint of `api`. The whole request is taken, not a `HeaderMap`
/// extractor, which clones the headers.
pub(super) async fn serve(gateway: Arc<Gateway>, api: Api, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    handle(gateway, api, headers_alone(parts), body).await
}

/// The request's headers; the rest of its head (the URI, and axum's copy of it in the
/// extensions) is dropped here. hyper parses a request's URI and header values as slices of the
/// connection's 8 KiB read buffer, and reads into a new buffer while the answer is made:
/// anything of the head kept through the call would keep the first buffer alive beside it, 8 KiB
/// more for every call in flight. [`handle`] drops the headers as soon as it has read them.
fn headers_alone(parts: axum::http::request::Parts) -> HeaderMap {
    parts.headers
}

struct Parsed {
    route: String,
    request: ChatRequest,
    stream: bool,
    include_usage: bool,
    evidence: Evidence,
    labels: std::collections::BTreeMap<String, String>,
    /// What a Response object repeats of the request (Responses callers only).
    echo: Option<wire::responses::Echo>,
}

/// A call's handler future lives as long as the call and is moved on its way to the
/// connection, so what it keeps across its awaits is kept small: each step's result is matched
/// where it is made (a named result would keep its room to the end), and the parsed request is
/// boxed, so it is kept once and moved as a pointer.
async fn handle(gateway: Arc<Gateway>, api: Api, headers: HeaderMap, body: Body) -> Response {
    let runtime = gateway.current();
    let (request_id, admitted) = intake::admit(&runtime, &headers, body).await;
    let (parsed, ctx) = match admitted
        .map_err(|refusal| refused(api, refusal, &runtime.config.server, &request_id))
        .and_then(|call| prepare(api, call, &request_id))
        .and_then(|(parsed, ctx)| {
            pinned(&runtime, &headers, api, &parsed.route, &ctx, &request_id)?;
            Ok((Box::new(parsed), ctx))
        }) {
        Ok(call) => call,
        Err(error) => return failed(&gateway, api, error),
    };
    // Everything the call needs of the headers is in its context now (see `headers_alone`).
    drop(headers);
    let (route, request) = (&parsed.route, &parsed.request);
    let (ctx, followup) =
        match run::before(&gateway, &runtime, api, route, request, ctx, &request_id).await {
            Ok(before) => before,
            Err(error) => return failed(&gateway, api, error),
        };
    drop(runtime);
    let (ctx, mut abandoned, after) = {
        // Borrowed under a binding of its own: a local once borrowed keeps its room to the end
        // of its scope, which for the first binding is the whole call.
        let started = ctx;
        let abandoned = Abandoned::new(&gateway, &parsed.route, &request_id);
        let recording = Recording::start(&gateway, api, &parsed.route, &started, &parsed.request);
        (started, abandoned, After { followup, recording })
    };
    if parsed.stream {
        stream(gateway, api, parsed, ctx, request_id, abandoned, after).await
    } else {
        let response = complete(gateway, api, parsed, ctx, request_id, after).await;
        abandoned.finished();
        response
    }
}

/// A call refused before it ran: counted by status, answered in the caller's format.
fn failed(gateway: &Gateway, api: Api, error: ApiError) -> Response {
    gateway.metrics.http_error(api.label(), error.status.as_u16());
    error.into_response()
}

/// The admitted call's body parsed in the caller's format, and its evidence in the context.
fn prepare(api: Api, call: Admitted, request_id: &str) -> Result<(Parsed, CallContext), ApiError> {
    let Admitted { mut ctx, body } = call;
    let mut parsed = match api {
        Api::OpenAi => wire::openai::parse_request(&body).map(|p| Parsed {
            route: p.route,
            request: p.request,
            stream: p.stream,
            include_usage: p.include_usage,
            evidence: p.evidence,
            labels: p.labels,
            echo: None,
        }),
        Api::Anthropic => wire::anthropic::parse_request(&body).map(|p| Parsed {
            route: p.route,
            request: p.request,
            stream: p.stream,
            include_usage: false,
            evidence: p.evidence,
            labels: p.labels,
            echo: None,
        }),
        Api::Responses => wire::responses::parse_request(&body).map(|p| Parsed {
            route: p.route,
            request: p.request,
            stream: p.stream,
            include_usage: false,
            evidence: p.evidence,
            labels: p.labels,
            echo: Some(p.echo),
        }),
    }
    .map_err(|error| ApiError::wire(api, &error, request_id))?;

    ctx.evidence = std::mem::take(&mut parsed.evidence);
    join_labels(&mut ctx, std::mem::take(&mut parsed.labels))
        .map_err(|error| ApiError::wire(api, &error, request_id))?;
    Ok((parsed, ctx))
}

/// A call pinned to one tier (`x-rein-pin-tier`, for evaluating it) or past the coverage check
/// (`x-rein-skip-coverage: true`, for sweeping its cutoff) must carry the admin key in
/// `x-rein-admin-key` (403 otherwise: a client key alone never picks a tier or skips a check),
/// and a pinned tier must be one of its route's (400).
fn pinned(
    runtime: &rein_runtime::Snapshot,
    headers: &HeaderMap,
    api: Api,
    route: &str,
    ctx: &CallContext,
    request_id: &str,
) -> Result<(), ApiError> {
    let asked = match (&ctx.pin_tier, ctx.skip_coverage) {
        (Some(_), _) => intake::PIN_TIER_HEADER,
        (None, true) => intake::SKIP_COVERAGE_HEADER,
        (None, false) => return Ok(()),
    };
    if !intake::admin_key_beside(runtime, headers) {
        let message = format!(
            "Header `{asked}` needs the gateway's admin key in `{}`.",
            intake::ADMIN_KEY_HEADER
        );
        return Err(ApiError::new(api, ErrorKind::PermissionDenied, &message, request_id));
    }
    let Some(tier) = &ctx.pin_tier else { return Ok(()) };
    let pin = intake::PIN_TIER_HEADER;
    let tiers = runtime
        .config
        .routes
        .get(route)
        .map(|config| config.tiers.iter().map(|tier| tier.name.clone()).collect::<Vec<_>>());
    match tiers {
        Some(tiers) if !tiers.contains(tier) => {
            let error = wire::WireError::invalid(
                pin,
                format!("route `{route}` has no tier `{tier}` (it has: {})", tiers.join(", ")),
            );
            Err(ApiError::wire(api, &error, request_id))
        }
        _ => Ok(()),
    }
}

/// The body's `rein.labels` joined with the `x-rein-labels` header's: a key given in both must
/// have the same value, and the two together stay within the per-call limit.
fn join_labels(
    ctx: &mut CallContext,
    labels: std::collections::BTreeMap<String, String>,
) -> Result<(), wire::WireError> {
    for (key, value) in labels {
        match ctx.labels.get(&key) {
            Some(header) if *header != value => {
                return Err(wire::WireError::invalid(
                    format!("rein.labels.{key}"),
                    format!("is `{value}` here but `{header}` in the `x-rein-labels` header"),
                ));
            }
            Some(_) => {}
            None => {
                ctx.labels.insert(key, value);
            }
        }
    }
    if ctx.labels.len() > rein_core::context::MAX_LABELS {
        return Err(wire::WireError::invalid(
            "rein.labels",
            format!(
                "with `x-rein-labels`, at most {} labels per call",
                rein_core::context::MAX_LABELS
            ),
        ));
    }
    Ok(())
}

/// A call the edge turned away, in the caller's format (a body that could not be read also
/// closes the connection).
fn refused(api: Api, refusal: Refusal, server: &ServerConfig, request_id: &str) -> ApiError {
    let (kind, message) = match refusal {
        Refusal::Unauthorized => {
            let message = match api {
                Api::OpenAi | Api::Responses => {
                    "Incorrect API key provided. Send a rein client key as `Authorization: Bearer <key>`."
                }
                Api::Anthropic => {
                    "invalid x-api-key: send a rein client key as `x-api-key` or `Authorization: Bearer`."
                }
            };
            (ErrorKind::Authentication, message.to_string())
        }
        Refusal::Header(problem) => (ErrorKind::InvalidRequest, problem.message),
        Refusal::MediaType(message) => (ErrorKind::UnsupportedMediaType, message),
        Refusal::Body(error) => {
            let kind = match error {
                BodyError::TooLarge => ErrorKind::RequestTooLarge,
                BodyError::Timeout => ErrorKind::RequestTimeout,
                BodyError::Broken(_) => ErrorKind::InvalidRequest,
            };
            return ApiError::new(api, kind, &error.message(server), request_id).closing();
        }
    };
    ApiError::new(api, kind, &message, request_id)
}

/// Counts and logs a call whose client went away before its answer was complete (hyper drops
/// the handler, or the streamed body, and the engine's call with it, cancelling upstream).
struct Abandoned {
    gateway: Arc<Gateway>,
    route: String,
    request_id: String,
    armed: bool,
}

impl Abandoned {
    fn new(gateway: &Arc<Gateway>, route: &str, request_id: &str) -> Self {
        Self {
            gateway: gateway.clone(),
            route: route.to_string(),
            request_id: request_id.to_string(),
            armed: true,
        }
    }

    fn finished(&mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if self.armed {
            self.gateway.metrics.call_abandoned(&self.route);
            tracing::info!(
                request_id = %self.request_id,
                route = %self.route,
                "client went away before the answer was complete: call cancelled upstream"
            );
        }
    }
}

fn meta(api: Api) -> ResponseMeta {
    let created = rein_core::clock::unix_ms() / 1000;
    match api {
        Api::OpenAi => ResponseMeta::new(intake::new_id("chatcmpl-"), created),
        Api::Anthropic => ResponseMeta::new(intake::new_id("msg_"), created),
        Api::Responses => ResponseMeta::new(intake::new_id("resp_"), created),
    }
}

/// What follows a call's end: the run's follow-up and the call's record.
struct After {
    followup: Option<Followup>,
    recording: Recording,
}

/// A whole answer. The call starts here, before anything is awaited (see [`stream`]): its
/// context and request go into the engine's future, boxed (most of a call's state, and the
/// handler's future is moved on its way to the connection: this way it moves a pointer), and
/// the future that awaits it keeps each thing it needs after once.
fn complete(
    gateway: Arc<Gateway>,
    api: Api,
    parsed: Box<Parsed>,
    ctx: CallContext,
    request_id: String,
    after: After,
) -> impl Future<Output = Response> + Send {
    let Parsed { route, request, echo, .. } = *parsed;
    let call = Box::pin(gateway.runtime.engine.complete(ctx, &route, request));
    let After { followup, recording } = after;
    async move {
        let result = call.await;
        if let Some(followup) = followup {
            match &result {
                Ok(done) => followup.finished(&gateway, Some(done), &done.report).await,
                Err(error) => {
                    if let Some(report) = error.report() {
                        followup.finished(&gateway, None, report).await;
                    }
                }
            }
        }
        match result {
            Ok(completion) => {
                let meta = meta(api);
                let body: Vec<u8> = match api {
                    Api::OpenAi => wire::openai::render_response_bytes(&completion, &meta),
                    Api::Anthropic => {
                        let body = wire::anthropic::render_response(&completion, &meta);
                        serde_json::to_vec(&body).unwrap_or_default()
                    }
                    Api::Responses => {
                        let echo = echo.unwrap_or_default();
                        let body = wire::responses::render_response(&completion, &meta, &echo);
                        serde_json::to_vec(&body).unwrap_or_default()
                    }
                };
                log_call(&request_id, &completion.report);
                // The map made with room for every header the answer gets, not grown as they come.
                let mut response = Response::new(Body::from(body));
                let headers = response.headers_mut();
                *headers =
                    HeaderMap::with_capacity(1 + answer_header_count(Some(&completion.report)));
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                let report = Some(&completion.report);
                answer_headers(headers, api, &request_id, report, recording.trace_id());
                let text = Some(completion.response.text.as_str());
                let report = Cow::Owned(completion.report);
                recording.finish(&gateway, report, Some(completion.response.usage), text);
                response
            }
            Err(error) => {
                let mut response = ApiError::call(api, &error, &request_id).into_response();
                let report = error.report();
                answer_headers(
                    response.headers_mut(),
                    api,
                    &request_id,
                    report,
                    recording.trace_id(),
                );
                if let Some(report) = error.report() {
                    log_call(&request_id, report);
                    recording.finish(&gateway, Cow::Borrowed(report), None, None);
                }
                response
            }
        }
    }
}

/// An encoder of released items in the caller's format.
enum Encoder {
    OpenAi(wire::OpenAiStream),
    Anthropic(wire::AnthropicStream),
    Responses(Box<wire::ResponsesStream>),
}

impl Encoder {
    fn encode(&mut self, item: &Released) -> Vec<Bytes> {
        match self {
            Encoder::OpenAi(e) => e.encode(item),
            Encoder::Anthropic(e) => e.encode(item),
            Encoder::Responses(e) => e.encode(item),
        }
    }

    /// The frames for `item`, appended to `out`.
    fn encode_into(&mut self, item: &Released, out: &mut Vec<u8>) {
        match self {
            Encoder::OpenAi(e) => e.encode_into(item, out),
            _ => {
                for frame in self.encode(item) {
                    out.extend_from_slice(&frame);
                }
            }
        }
    }

    fn close(&mut self) -> Vec<Bytes> {
        match self {
            Encoder::OpenAi(e) => e.close(),
            Encoder::Anthropic(e) => e.close(),
            Encoder::Responses(e) => e.close(),
        }
    }
}

/// A streamed call's answer. The call starts here, before anything is awaited, and what only
/// starting it takes (the context, the request) goes into it: the future that reads it keeps
/// each thing it needs once, as a capture of its own (an `async fn` would keep each argument
/// twice, as it came and as the local it is moved into, and the context to the end). A checked
/// stream's handler holds this future until the whole answer is in.
fn stream(
    gateway: Arc<Gateway>,
    api: Api,
    parsed: Box<Parsed>,
    ctx: CallContext,
    request_id: String,
    mut abandoned: Abandoned,
    after: After,
) -> impl Future<Output = Response> + Send {
    let engine = &gateway.runtime.engine;
    let mode = engine.release_mode(&parsed.route);
    let keepalive = gateway
        .current()
        .config
        .routes
        .get(&parsed.route)
        .map(|route| route.stream_keepalive)
        .filter(|every| !every.is_zero());
    let Parsed { route, request, include_usage, echo, .. } = *parsed;
    let mut released = match engine.stream(ctx, &route, request) {
        Ok(stream) => stream,
        Err(error) => {
            abandoned.finished();
            let response = ApiError::call(api, &error, &request_id).into_response();
            return futures_util::future::Either::Left(std::future::ready(response));
        }
    };
    let After { mut followup, recording } = after;
    let mut recording = Some(recording);
    futures_util::future::Either::Right(async move {
        let quiet_until = keepalive.map(|every| tokio::time::Instant::now() + every);
        // Hold items until the outcome is known (checked mode: the whole answer is held anyway) or,
        // in passthrough mode, until the first piece of content, which must not wait; but never
        // longer than the keep-alive interval: then the head goes out with a comment, and whatever
        // follows (a failure included) is delivered in the stream.
        let mut held = Vec::new();
        let mut report: Option<CallReport> = None;
        let mut quiet = false;
        loop {
            let next = match quiet_until {
                Some(at) => match tokio::time::timeout_at(at, released.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        quiet = true;
                        break;
                    }
                },
                None => released.next().await,
            };
            match next {
                None => break,
                Some(Released::Failed(error)) if held.is_empty() => {
                    let mut response = ApiError::call(api, &error, &request_id).into_response();
                    let report = error.report();
                    let trace_id = recording.as_ref().and_then(Recording::trace_id);
                    answer_headers(response.headers_mut(), api, &request_id, report, trace_id);
                    if let Some(report) = error.report() {
                        log_call(&request_id, report);
                        if let Some(recording) = recording.take() {
                            recording.finish(&gateway, Cow::Borrowed(report), None, None);
                        }
                        if let Some(followup) = followup.take() {
                            followup.finished(&gateway, None, report).await;
                        }
                    }
                    abandoned.finished();
                    return response;
                }
                Some(item) => {
                    let content = matches!(&item, Released::Event(e) if e.is_content());
                    let end = match &item {
                        Released::Completed(done) => {
                            report = Some(done.report.clone());
                            true
                        }
                        Released::Failed(error) => {
                            report = error.report().cloned();
                            true
                        }
                        Released::Event(_) => false,
                    };
                    held.push(item);
                    if end || (content && mode == Some(ReleaseMode::Passthrough)) {
                        break;
                    }
                }
            }
        }
        let trace_id = recording.as_ref().and_then(Recording::trace_id).map(str::to_string);
        if let Some(report) = &report {
            log_call(&request_id, report);
            let done = held.iter().find_map(|item| match item {
                Released::Completed(done) => Some(&**done),
                _ => None,
            });
            if let Some(recording) = recording.take() {
                let usage = done.map(|done| done.response.usage);
                let text = done.map(|done| done.response.text.as_str());
                recording.finish(&gateway, Cow::Borrowed(report), usage, text);
            }
        }
        if let Some(report) = &report
            && let Some(followup) = followup.take()
        {
            let done = held.iter().find_map(|item| match item {
                Released::Completed(done) => Some(&**done),
                _ => None,
            });
            followup.finished(&gateway, done, report).await;
        }
        let mut encoder = match api {
            Api::OpenAi => Encoder::OpenAi(wire::OpenAiStream::new(meta(api), include_usage)),
            Api::Anthropic => Encoder::Anthropic(wire::AnthropicStream::new(meta(api))),
            Api::Responses => Encoder::Responses(Box::new(wire::ResponsesStream::new(
                meta(api),
                echo.unwrap_or_default(),
            ))),
        };
        // Everything held goes out as one body frame (so with the headers in one write).
        let mut first = Vec::new();
        for item in &held {
            encoder.encode_into(item, &mut first);
        }
        if quiet {
            first.extend_from_slice(KEEPALIVE);
        }
        // The encoder finishes itself on `Completed`/`Failed`; the rest of the stream is needed
        // only when neither has arrived yet.
        let finished = report.is_some();
        if finished {
            abandoned.finished();
        }
        let rest = Rest {
            first: (!first.is_empty()).then_some(first),
            released: if finished { None } else { Some(released) },
            keepalive: keepalive.map(|every| (every, Box::pin(tokio::time::sleep(every)))),
            encoder,
            request_id: request_id.clone(),
            abandoned,
            followup: followup.map(|followup| (gateway.clone(), followup)),
            recording: recording.map(|recording| (gateway.clone(), Box::new(recording))),
        };
        let body_stream = rest;
        let mut response = Response::new(Body::from_stream(body_stream));
        let passthrough = mode == Some(ReleaseMode::Passthrough);
        *response.headers_mut() =
            stream_headers(api, &request_id, passthrough, report.as_ref(), trace_id.as_deref());
        response
    })
}

/// A whole answer's (or an error's) headers beside those it has: the report's, the trace id's,
/// with room made at once for them and for the `content-length` hyper adds, so the map is not
/// grown (and rehashed) as they come.
fn answer_headers(
    headers: &mut HeaderMap,
    api: Api,
    request_id: &str,
    report: Option<&CallReport>,
    trace_id: Option<&str>,
) {
    headers.reserve(answer_header_count(report) - usize::from(trace_id.is_none()));
    report_headers(headers, api, request_id, report);
    trace_header(headers, trace_id);
}

/// How many headers [`answer_headers`] adds at most: the report's, the trace id and hyper's
/// `content-length`.
fn answer_header_count(report: Option<&CallReport>) -> usize {
    report_header_count(report) + 2
}

/// A streamed answer's response headers, in a map of just their number. The map outlives the
/// call: the connection keeps it, for the next request's headers, while the stream is open.
fn stream_headers(
    api: Api,
    request_id: &str,
    passthrough: bool,
    report: Option<&CallReport>,
    trace_id: Option<&str>,
) -> HeaderMap {
    let own = 2 + usize::from(passthrough);
    let traced = usize::from(trace_id.is_some());
    let mut headers = HeaderMap::with_capacity(own + report_header_count(report) + traced);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if passthrough {
        headers.insert("x-rein-release", HeaderValue::from_static("passthrough"));
    }
    report_headers(&mut headers, api, request_id, report);
    trace_header(&mut headers, trace_id);
    headers
}

/// The call's trace id, for finding it in the trace store or the caller's tracing backend.
pub(super) fn trace_header(headers: &mut HeaderMap, trace_id: Option<&str>) {
    if let Some(trace_id) = trace_id
        && let Ok(value) = HeaderValue::from_str(trace_id)
    {
        headers.insert(names::TRACE_ID.clone(), value);
    }
}

/// The bytes a streamed body's batch starts with room for.
const BATCH_ROOM: usize = 1024;

/// An SSE comment: every SSE client skips it, and it resets a client's read timeout.
const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// The body of a streamed answer: the held items, then the rest of the released stream as it
/// comes. Each poll sends, as one frame, everything that is ready at that moment (never
/// waiting for more), so an answer that arrives in one piece leaves in one write while a
/// slow stream still goes out event by event.
struct Rest {
    first: Option<Vec<u8>>,
    released: Option<ReleaseStream>,
    /// The keep-alive interval and the quiet gap's timer: an SSE comment goes out when it
    /// fires before anything else does.
    keepalive: Option<(std::time::Duration, std::pin::Pin<Box<tokio::time::Sleep>>)>,
    encoder: Encoder,
    request_id: String,
    /// Disarmed when the stream ends; dropped armed when the client goes away first.
    abandoned: Abandoned,
    /// What the run does once the answer is over (spawned: the body must not wait on it).
    followup: Option<(Arc<Gateway>, Followup)>,
    /// The call's record, finished when the stream ends.
    recording: Option<(Arc<Gateway>, Box<Recording>)>,
}

impl futures_util::Stream for Rest {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;

        let this = &mut *self;
        let mut batch = this.first.take().unwrap_or_default();
        while let Some(released) = this.released.as_mut() {
            match released.poll_next_unpin(cx) {
                Poll::Ready(Some(item)) => {
                    if batch.capacity() == 0 {
                        // Room for a few frames at once: an answer that arrives in one piece
                        // fills the batch in two or three steps, not six.
                        batch.reserve(BATCH_ROOM);
                    }
                    if let Released::Completed(done) = &item {
                        log_call(&this.request_id, &done.report);
                        if let Some((gateway, recording)) = this.recording.take() {
                            let (usage, text) = (done.response.usage, &done.response.text);
                            recording.finish(
                                &gateway,
                                Cow::Borrowed(&done.report),
                                Some(usage),
                                Some(text),
                            );
                        }
                        if let Some((gateway, followup)) = this.followup.take()
                            && followup.needed(&done.report)
                        {
                            let done = done.clone();
                            tokio::spawn(async move {
                                followup.finished(&gateway, Some(&*done), &done.report).await;
                            });
                        }
                    }
                    if let Released::Failed(error) = &item
                        && let Some(report) = error.report()
                    {
                        log_call(&this.request_id, report);
                        if let Some((gateway, recording)) = this.recording.take() {
                            recording.finish(&gateway, Cow::Borrowed(report), None, None);
                        }
                        if let Some((gateway, followup)) = this.followup.take()
                            && followup.needed(report)
                        {
                            let report = report.clone();
                            tokio::spawn(async move {
                                followup.finished(&gateway, None, &report).await;
                            });
                        }
                    }
                    this.encoder.encode_into(&item, &mut batch);
                }
                Poll::Ready(None) => {
                    for frame in this.encoder.close() {
                        batch.extend_from_slice(&frame);
                    }
                    this.released = None;
                    this.abandoned.finished();
                }
                Poll::Pending => break,
            }
        }
        if let Some((every, quiet)) = this.keepalive.as_mut()
            && this.released.is_some()
        {
            if batch.is_empty() && quiet.as_mut().poll(cx).is_ready() {
                batch.extend_from_slice(KEEPALIVE);
            }
            if !batch.is_empty() {
                quiet.as_mut().reset(tokio::time::Instant::now() + *every);
            }
        }
        if !batch.is_empty() {
            Poll::Ready(Some(Ok(Bytes::from(batch))))
        } else if this.released.is_none() {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

/// The response headers rein sets, parsed once.
mod names {
    use axum::http::HeaderName;

    pub(super) static REQUEST_ID: HeaderName = HeaderName::from_static("x-rein-request-id");
    pub(super) static OPENAI_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    pub(super) static ANTHROPIC_REQUEST_ID: HeaderName = HeaderName::from_static("request-id");
    pub(super) static ROUTE: HeaderName = HeaderName::from_static("x-rein-route");
    pub(super) static TRACE_ID: HeaderName = HeaderName::from_static("x-rein-trace-id");
    pub(super) static OUTCOME: HeaderName = HeaderName::from_static("x-rein-outcome");
    pub(super) static RUN_STATUS: HeaderName = HeaderName::from_static("x-rein-run-status");
    pub(super) static ATTEMPTS: HeaderName = HeaderName::from_static("x-rein-attempts");
    pub(super) static REASKS: HeaderName = HeaderName::from_static("x-rein-reasks");
    pub(super) static REPAIRS: HeaderName = HeaderName::from_static("x-rein-repairs");
    pub(super) static SETTINGS_VERSION: HeaderName =
        HeaderName::from_static("x-rein-settings-version");
    pub(super) static TIER: HeaderName = HeaderName::from_static("x-rein-tier");
    pub(super) static PROVIDER: HeaderName = HeaderName::from_static("x-rein-provider");
    pub(super) static MODEL: HeaderName = HeaderName::from_static("x-rein-model");
}

fn report_headers(
    headers: &mut HeaderMap,
    api: Api,
    request_id: &str,
    report: Option<&CallReport>,
) {
    set_text(headers, &names::REQUEST_ID, request_id);
    let vendor_id = if api == Api::Anthropic {
        &names::ANTHROPIC_REQUEST_ID
    } else {
        &names::OPENAI_REQUEST_ID
    };
    set_text(headers, vendor_id, request_id);
    if let Some(report) = report {
        set_text(headers, &names::ROUTE, &report.route);
        headers.insert(names::OUTCOME.clone(), HeaderValue::from_static(report.outcome.as_str()));
        headers.insert(names::ATTEMPTS.clone(), count(report.attempt_count()));
        headers.insert(names::REASKS.clone(), count(report.reask_count()));
        headers.insert(names::REPAIRS.clone(), count(report.repairs().len()));
        if let Some(version) = report.settings_version {
            headers.insert(names::SETTINGS_VERSION.clone(), HeaderValue::from(version));
        }
        if let Some(status) = report.run_status() {
            set_text(headers, &names::RUN_STATUS, status);
        }
        if let Some(served) = &report.served_by {
            set_text(headers, &names::TIER, &served.tier_name);
            set_text(headers, &names::PROVIDER, &served.provider);
            set_text(headers, &names::MODEL, &served.model);
        }
    }
}

/// How many headers [`report_headers`] sets for `report` (at most; one whose text is not a valid
/// header value is left out).
fn report_header_count(report: Option<&CallReport>) -> usize {
    let Some(report) = report else { return 2 };
    2 + 5
        + usize::from(report.settings_version.is_some())
        + usize::from(report.run_status().is_some())
        + if report.served_by.is_some() { 3 } else { 0 }
}

/// A count as a header value; the usual small ones without formatting or allocating.
fn count(n: usize) -> HeaderValue {
    const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match DIGITS.get(n) {
        Some(digit) => HeaderValue::from_static(digit),
        None => HeaderValue::from(n),
    }
}

/// Sets a header to `value`, or leaves it out when `value` is not a valid header value.
fn set_text(headers: &mut HeaderMap, name: &axum::http::HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name.clone(), value);
    }
}

fn log_call(request_id: &str, report: &CallReport) {
    let reason = (report.served_by.is_none()).then(|| not_served_reason(report));
    tracing::info!(
        request_id,
        route = %report.route,
        outcome = report.outcome.as_str(),
        attempts = report.attempt_count(),
        tier = report.served_by.as_ref().map(|s| s.tier_name.as_str()).unwrap_or("-"),
        elapsed_ms = report.elapsed_ms,
        reason = reason.as_deref().unwrap_or("-"),
        "call finished"
    );
}

/// Why no tier served the call, from its steps: the kill switch, or each tier given up on and
/// why (`primary: attempts_exhausted (overloaded); fallback: cooling_down`).
fn not_served_reason(report: &CallReport) -> String {
    use rein_core::report::Step;
    let mut reasons = Vec::new();
    for step in &report.steps {
        match step {
            Step::KillSwitch { reason } => reasons.push(format!("kill switch: {reason}")),
            Step::TierSkipped { tier, tier_name, reason, .. } => {
                let why = serde_json::to_value(reason)
                    .ok()
                    .and_then(|v| v.get("why").and_then(|w| w.as_str()).map(str::to_string))
                    .unwrap_or_else(|| "skipped".into());
                let last_failure = report
                    .attempts()
                    .filter(|a| a.tier == *tier)
                    .last()
                    .and_then(|a| a.classified.as_ref())
                    .map(|classified| format!(" ({})", classified.reason));
                reasons.push(format!("{tier_name}: {why}{}", last_failure.unwrap_or_default()));
            }
            _ => {}
        }
    }
    if reasons.is_empty() { "no tier answered".into() } else { reasons.join("; ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_header_reads_as_the_number() {
        for n in [0, 1, 2, 9, 10, 11, 99, 12_345, usize::MAX] {
            assert_eq!(count(n).to_str().unwrap(), n.to_string());
        }
    }

    fn report(settings: bool, run_stopped: bool, served: bool) -> CallReport {
        let mut steps = Vec::new();
        if run_stopped {
            steps.push(rein_core::report::Step::RunStopped {
                status: "stopped_repeated_call".into(),
            });
        }
        CallReport {
            route: "r".into(),
            settings_version: settings.then_some(3),
            outcome: rein_core::report::Outcome::Answered,
            served_by: served.then(|| rein_core::report::ServedBy {
                tier: 0,
                tier_name: "primary".into(),
                provider: "sim".into(),
                model: "m".into(),
                failover: false,
            }),
            steps,
            alerts: Vec::new(),
            elapsed_ms: 1,
            rejected_draft: None,
            labels: Default::default(),
        }
    }

    /// The count a map is sized by is the count of headers set, for every shape of report.
    #[test]
    fn the_report_header_count_is_the_headers_set() {
        let mut reports = vec![None];
        for bits in 0..8u8 {
            reports.push(Some(report(bits & 1 != 0, bits & 2 != 0, bits & 4 != 0)));
        }
        for report in &reports {
            for api in [Api::OpenAi, Api::Anthropic, Api::Responses] {
                let mut headers = HeaderMap::new();
                report_headers(&mut headers, api, "req-1", report.as_ref());
                assert_eq!(headers.len(), report_header_count(report.as_ref()), "{report:?}");
            }
        }
    }

    /// A streamed answer's header map stays open with the stream (the connection keeps it), so
    /// it is sized for what it holds: a passthrough stream's six headers take a map of six, not
    /// one grown to 24 (2.5 KB a stream, when it reserved for a whole report).
    #[test]
    fn a_streams_header_map_has_room_for_its_headers_alone() {
        for (passthrough, report, trace) in [
            (true, None, Some("0af7651916cd43dd8448eb211c80319c")),
            (true, None, None),
            (false, Some(report(true, true, true)), Some("0af7651916cd43dd8448eb211c80319c")),
            (false, Some(report(false, false, true)), None),
        ] {
            let headers = stream_headers(Api::OpenAi, "req-1", passthrough, report.as_ref(), trace);
            let want = 2
                + usize::from(passthrough)
                + report_header_count(report.as_ref())
                + usize::from(trace.is_some());
            assert_eq!(headers.len(), want);
            // A map's room is three quarters of a power of two: the least one that holds them.
            let least = HeaderMap::<HeaderValue>::with_capacity(want).capacity();
            assert_eq!(headers.capacity(), least, "{want} headers");
        }
        let passthrough = stream_headers(Api::OpenAi, "req-1", true, None, Some("t"));
        assert_eq!(passthrough.capacity(), 6);
        assert_eq!(passthrough["x-rein-release"], "passthrough");
        assert_eq!(passthrough[header::CONTENT_TYPE], "text/event-stream");
    }

    /// A whole answer's map is made with room for every header it gets, hyper's
    /// `content-length` included: none of them grows it (each growth rehashes the map).
    #[test]
    fn a_whole_answers_headers_fit_the_map_they_start_in() {
        for report in [report(true, true, true), report(false, false, false)] {
            for trace in [Some("0af7651916cd43dd8448eb211c80319c"), None] {
                let mut headers = HeaderMap::with_capacity(1 + answer_header_count(Some(&report)));
                let room = headers.capacity();
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                answer_headers(&mut headers, Api::OpenAi, "req-1", Some(&report), trace);
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("120"));
                assert_eq!(headers.capacity(), room, "{} headers", headers.len());
            }
        }
    }

    /// A call's handler future lives as long as the call (a checked stream's until the whole
    /// answer is in), and is moved into a box on its way to the connection: it stays small. It
    /// was 7,000 bytes while it kept each step's result beside the awaits after it and the parsed
    /// request by value; 2,752 while the streamed and whole answers' `async fn`s kept their
    /// arguments (the call's context among them) to the end; 1,960 now, under mimalloc's
    /// 2,048-byte class.
    #[tokio::test]
    async fn a_calls_handler_keeps_little_across_its_awaits() {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = dir.path().join("rein.sqlite");
        let toml = format!(
            r#"
[store]
sqlite_path = "{}"

[providers.sim]
kind = "openai_compatible"
base_url = "http://127.0.0.1:9/v1"

[routes.r]
[[routes.r.tiers]]
name = "primary"
provider = "sim"
model = "m"
"#,
            sqlite.display()
        );
        let env: rein_runtime::EnvSource = Arc::new(|_: &str| None);
        let config = rein_runtime::config::Config::from_toml(&toml, &*env).unwrap();
        let gateway = Gateway::from_config(config, None, None, env).await.unwrap();
        let handler = serve(gateway, Api::OpenAi, Request::new(Body::empty()));
        let size = std::mem::size_of_val(&handler);
        assert!(size <= 2048, "a call's handler future is {size} bytes");
    }
}
