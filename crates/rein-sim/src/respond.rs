//! Answering one provider request: choose the fault (header, then `sim:` model, then scenario
//! phase; scripts walk by sequence key), log the attempt, and build the reply in the request's
//! wire format: an error, a dropped connection, silence, or an answer sent whole, paced or
//! broken. An answer's text comes from the fault's `say`, else the scenario's first matching
//! reply rule (text answers only), else the deterministic healthy answer.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use rein_core::WireFormat;
use serde_json::Value;

use crate::answer::{Plan, answers_text, fnv1a};
use crate::body::{Chunk, SimBody};
use crate::fault::{ErrorFault, ErrorKind, FaultSpec, Outcome, Shape, Step, Transport};
use crate::log::{FaultSource, LogEntry};
use crate::request::SimRequest;
use crate::state::Shared;
use crate::stream::Driver;
use crate::wire::{self, Ctx};

/// The request header that picks a fault.
pub const FAULT_HEADER: &str = "x-sim-fault";

/// A request as the server read it.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// What the connection should do.
#[derive(Debug)]
pub(crate) enum Reply {
    Send(Response<SimBody>),
    /// Wait this long, then drop the connection with a TCP reset.
    Reset(Option<Duration>),
    /// Never answer.
    Hang,
}

/// Which provider endpoint was called.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Endpoint {
    Chat(WireFormat),
    Models(WireFormat),
    /// OpenAI's Responses API: OpenAI's errors and headers, its own bodies and stream.
    Responses,
}

impl Endpoint {
    fn format(self) -> WireFormat {
        match self {
            Endpoint::Chat(f) | Endpoint::Models(f) => f,
            Endpoint::Responses => WireFormat::OpenAi,
        }
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Answers a provider endpoint.
pub(crate) async fn provider(shared: &Shared, endpoint: Endpoint, req: Incoming) -> Reply {
    answer(shared, endpoint, req, false).await
}

/// Answers a Vertex AI model path: answers in `endpoint`'s format, errors as Vertex sends
/// them (Google's bodies, but Anthropic's 529 for an overloaded Claude).
pub(crate) async fn vertex(shared: &Shared, endpoint: Endpoint, req: Incoming) -> Reply {
    answer(shared, endpoint, req, true).await
}

async fn answer(shared: &Shared, endpoint: Endpoint, req: Incoming, vertex: bool) -> Reply {
    let format = endpoint.format();
    let (elapsed, unix_ms) = shared.now();
    let unique = shared.next_id();
    let (id_header, request_id) = wire::request_id(format, unique);
    let mut entry = new_entry(&req, Some(format), elapsed, unix_ms, &request_id);
    let responses = matches!(endpoint, Endpoint::Responses);
    let replier = Replier {
        shared,
        format,
        responses,
        vertex,
        id_header,
        request_id,
        unix_s: unix_ms / 1000,
    };

    let body: Value = match endpoint {
        Endpoint::Models(_) => Value::Null,
        Endpoint::Chat(_) | Endpoint::Responses => match serde_json::from_slice(&req.body) {
            Ok(body) => body,
            Err(e) => {
                let message = match format {
                    WireFormat::OpenAi => format!(
                        "We could not parse the JSON body of your request. (HINT: This likely \
                         means you aren't using your HTTP library correctly. The OpenAI API \
                         expects a JSON payload, but what was sent was not valid JSON.) ({e})"
                    ),
                    WireFormat::Anthropic | WireFormat::Bedrock => {
                        format!("The request body is not valid JSON: {e}")
                    }
                    WireFormat::Gemini => format!("Invalid JSON payload received. {e}"),
                };
                return replier.error(entry, &bad_request(message), "");
            }
        },
    };
    // Gemini names the model and the streaming in the path; its body is read as the same
    // conversation in Chat Completions terms.
    let body = match endpoint {
        Endpoint::Chat(WireFormat::Gemini) => crate::gemini::chat_body(&req.path, &body),
        Endpoint::Responses => match crate::responses::chat_body(&body) {
            Ok(body) => body,
            Err(message) => return replier.error(entry, &bad_request(message), ""),
        },
        _ => body,
    };
    let model = body.get("model").and_then(Value::as_str).unwrap_or("").to_owned();
    entry.model = body.get("model").and_then(Value::as_str).map(str::to_owned);
    entry.stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    entry.sequence_key =
        sequence_key(&model, body.get("messages").unwrap_or(&Value::Null), &req.path);

    // The fault: header, then model, then scenario. The scenario draws from its mix only
    // for requests it decides, so overrides don't shift a seeded run.
    let explicit = match header(&req.headers, FAULT_HEADER) {
        Some(spec) => Some((spec, FaultSource::Header)),
        None => model.strip_prefix("sim:").map(|spec| (spec.to_owned(), FaultSource::Model)),
    };
    let pick = shared.scenario_pick(Some(format), &model, explicit.is_none());
    entry.phase = pick.phase;
    let chosen: Result<Option<(FaultSpec, FaultSource)>, crate::FaultSpecError> = match &explicit {
        Some((spec, source)) => FaultSpec::parse(spec).map(|s| Some((s, *source))),
        None => Ok(pick.spec.map(|s| (s, FaultSource::Scenario))),
    };
    let step = match chosen {
        Err(e) => {
            entry.fault = e.spec.clone();
            entry.fault_source = explicit.map_or(FaultSource::None, |(_, source)| source);
            return replier.error(entry, &bad_request(e.to_string()), &model);
        }
        Ok(None) => Step::healthy(),
        Ok(Some((spec, source))) => {
            entry.fault_source = source;
            let index = if spec.is_script() {
                entry.script = Some(spec.as_str().to_owned());
                let messages = body.get("messages").unwrap_or(&Value::Null);
                let extends = extended_key(&model, messages, &req.path);
                let index = shared.next_script_index(
                    &entry.sequence_key,
                    extends.as_deref(),
                    spec.as_str(),
                );
                let applied = index.min(spec.steps().len().saturating_sub(1));
                entry.script_step = Some(u32::try_from(applied + 1).unwrap_or(u32::MAX));
                index
            } else {
                0
            };
            spec.step(index).clone()
        }
    };
    entry.fault = step.as_str().to_owned();
    let first_wait = step.slow_first_token_ms.map(Duration::from_millis);

    let (shape, transport, say) = match &step.outcome {
        Outcome::Error(fault) => {
            sleep(first_wait).await;
            return replier.error(entry, fault, &model);
        }
        Outcome::Reset => {
            shared.log.record(entry);
            return Reply::Reset(first_wait);
        }
        Outcome::Hang => {
            shared.log.record(entry);
            return Reply::Hang;
        }
        Outcome::Answer { shape, transport, say } => (*shape, *transport, say.as_deref()),
    };

    if let Endpoint::Models(_) = endpoint {
        sleep(first_wait).await;
        let models = wire::models(format, replier.unix_s);
        return replier.send(entry, StatusCode::OK, &models, Vec::new());
    }

    let request = match SimRequest::parse(Some(format), &body) {
        Ok(request) => request,
        Err(message) => return replier.error(entry, &bad_request(message), &model),
    };
    if shape == Some(Shape::RejectPrefill) && request.ends_with_prefill() {
        sleep(first_wait).await;
        return replier.error(entry, &ErrorFault::of(ErrorKind::PrefillRejected), &model);
    }
    // A reply rule scripts text answers that neither `say` nor `refusal` replaces.
    let scripted = match (say, request.last_user_message()) {
        (None, Some(text)) if shape != Some(Shape::Refusal) && answers_text(&request) => {
            shared.scripted_reply(&model, text)
        }
        _ => None,
    };
    entry.reply_rule =
        scripted.as_ref().map(|(index, _)| u32::try_from(*index).unwrap_or(u32::MAX));
    let shape = shape.filter(|s| *s != Shape::RejectPrefill);
    let plan = Plan::build(&request, shape, say, scripted.as_ref().map(|(_, s)| s));
    let plan = match request.prefill() {
        Some(prefill) => plan.continued(prefill),
        None => plan,
    };
    let invoke =
        format == WireFormat::Bedrock && crate::bedrock::route(&req.path).is_some_and(|c| c.invoke);
    let response_id = if invoke {
        crate::bedrock::invoke_response_id(shared.next_id())
    } else if responses {
        crate::responses::response_id(shared.next_id())
    } else {
        wire::response_id(format, shared.next_id())
    };
    let ctx = Ctx { request: &request, response_id, created: replier.unix_s, invoke };
    let token_delay = step.token_delay_ms.map(Duration::from_millis);
    if request.stream {
        return replier.stream(entry, &ctx, &plan, transport, first_wait, token_delay);
    }
    // A non-streaming answer takes as long as its stream would have.
    let extra_tokens = plan.output_tokens().saturating_sub(1);
    let generation =
        first_wait.unwrap_or_default() + token_delay.unwrap_or_default() * extra_tokens;
    if is_stream_error(transport) {
        // No stream to break: the equivalent error status.
        let kind = match format {
            WireFormat::OpenAi => ErrorKind::Internal,
            WireFormat::Anthropic | WireFormat::Gemini => ErrorKind::Overloaded,
            WireFormat::Bedrock => ErrorKind::Unavailable,
        };
        sleep(first_wait).await;
        return replier.error(entry, &ErrorFault::of(kind), &model);
    }
    let body = if responses {
        crate::responses::body(&ctx, &plan)
    } else {
        wire::body(format, &ctx, &plan)
    };
    replier.whole(entry, &body, transport, generation).await
}

fn is_stream_error(transport: Option<Transport>) -> bool {
    matches!(transport, Some(Transport::StreamError { .. }))
}

async fn sleep(wait: Option<Duration>) {
    if let Some(wait) = wait.filter(|w| !w.is_zero()) {
        tokio::time::sleep(wait).await;
    }
}

fn bad_request(message: String) -> ErrorFault {
    let mut fault = ErrorFault::of(ErrorKind::BadRequest);
    fault.reason = Some(message);
    fault
}

/// Hash of (model, messages, path), 16 hex digits.
pub(crate) fn sequence_key(model: &str, messages: &Value, path: &str) -> String {
    let text = format!("{model}\u{1f}{messages}\u{1f}{path}");
    format!("{:016x}", fnv1a(text.as_bytes()))
}

/// The sequence key of the conversation this request extends, when its `messages` end with an
/// assistant turn and then a user turn after at least one earlier message: the shape of a
/// re-ask (the failed answer and the problems) or of a conversation's next turn. Such a request
/// continues the script of the request it extends, so `say:…,say:…` can script a re-ask.
pub(crate) fn extended_key(model: &str, messages: &Value, path: &str) -> Option<String> {
    let list = messages.as_array()?;
    let role = |index: usize| list.get(index).and_then(|m| m.get("role")).and_then(Value::as_str);
    let len = list.len();
    if len < 3 || role(len - 1) != Some("user") || role(len - 2) != Some("assistant") {
        return None;
    }
    let earlier = Value::Array(list[..len - 2].to_vec());
    Some(sequence_key(model, &earlier, path))
}

/// Builds replies for one request and logs them.
struct Replier<'a> {
    shared: &'a Shared,
    format: WireFormat,
    /// The Responses API rather than the format's own chat endpoint.
    responses: bool,
    /// Errors as Vertex AI sends them.
    vertex: bool,
    id_header: &'static str,
    request_id: String,
    unix_s: u64,
}

impl Replier<'_> {
    fn base(&self, status: StatusCode, content_type: &'static str) -> http::response::Builder {
        let mut builder = Response::builder()
            .status(status)
            .header(CONTENT_TYPE, content_type)
            .header(self.id_header, self.request_id.as_str());
        if self.format == WireFormat::OpenAi {
            builder =
                builder.header("openai-version", "2020-10-01").header("openai-processing-ms", "1");
        }
        builder
    }

    fn finish(&self, mut entry: LogEntry, response: Response<SimBody>) -> Reply {
        entry.status = Some(response.status().as_u16());
        let mut response = response;
        if let Ok(value) = HeaderValue::from_str(&entry.fault) {
            response.headers_mut().insert("x-sim-fault-applied", value);
        }
        self.shared.log.record(entry);
        Reply::Send(response)
    }

    fn send(
        &self,
        entry: LogEntry,
        status: StatusCode,
        body: &Value,
        headers: Vec<(&'static str, String)>,
    ) -> Reply {
        let mut builder = self.base(status, "application/json");
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        self.finish(entry, build(builder, SimBody::full(body.to_string())))
    }

    fn error(&self, entry: LogEntry, fault: &ErrorFault, model: &str) -> Reply {
        let anthropic_overload =
            self.format == WireFormat::Anthropic && fault.kind == ErrorKind::Overloaded;
        let error = match self.vertex && !anthropic_overload {
            true => crate::vertex::error(fault, model),
            false => wire::error(self.format, fault, model, &self.request_id, self.unix_s),
        };
        let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST);
        self.send(entry, status, &error.body, error.headers)
    }

    fn stream(
        &self,
        entry: LogEntry,
        ctx: &Ctx<'_>,
        plan: &Plan,
        transport: Option<Transport>,
        slow_first_token: Option<Duration>,
        token_delay: Option<Duration>,
    ) -> Reply {
        let driver = if self.responses {
            Driver {
                frames: crate::responses::frames(ctx, plan),
                transport,
                slow_first_token,
                token_delay,
                malformed: crate::responses::malformed_frame(ctx),
                error: crate::responses::stream_error_frame(ctx),
            }
        } else {
            Driver {
                frames: wire::frames(self.format, ctx, plan),
                transport,
                slow_first_token,
                token_delay,
                malformed: wire::malformed_frame(self.format, ctx),
                error: wire::stream_error_frame(self.format),
            }
        };
        let (tx, body) = SimBody::channel();
        tokio::spawn(driver.run(tx));
        let mut builder = self
            .base(StatusCode::OK, stream_content_type(self.format))
            .header(CACHE_CONTROL, "no-cache");
        if transport == Some(Transport::NoDone) {
            builder = builder.header(CONNECTION, "close");
        }
        self.finish(entry, build(builder, body))
    }

    /// A non-streaming answer, after `generation` time, broken as `transport` says.
    async fn whole(
        &self,
        entry: LogEntry,
        body: &Value,
        transport: Option<Transport>,
        generation: Duration,
    ) -> Reply {
        let bytes = Bytes::from(body.to_string());
        let half = bytes.slice(..bytes.len() / 2);
        let builder = self.base(StatusCode::OK, "application/json");
        let response = match transport {
            None => build(builder, SimBody::full(bytes)),
            Some(Transport::NoDone) => {
                build(builder.header(CONNECTION, "close"), SimBody::full(bytes))
            }
            Some(Transport::Malformed { .. }) => build(builder, SimBody::full(half)),
            Some(Transport::Cut { .. }) | Some(Transport::Stall { .. }) => {
                // Announce the whole length, send half, then cut or go quiet.
                let (tx, body) = SimBody::channel();
                let cut = matches!(transport, Some(Transport::Cut { .. }));
                tokio::spawn(async move {
                    if tx.send(Chunk::Data(half)).await.is_err() {
                        return;
                    }
                    if cut {
                        let _ = tx.send(Chunk::Abort).await;
                    } else {
                        tx.closed().await;
                    }
                });
                build(builder.header(CONTENT_LENGTH, bytes.len()), body)
            }
            Some(Transport::StreamError { .. }) => build(builder, SimBody::full(bytes)),
        };
        let reply = self.finish(entry, response);
        sleep(Some(generation)).await;
        reply
    }
}

/// Finishes a response builder; the headers are all ours, so this cannot fail in practice.
fn build(builder: http::response::Builder, body: SimBody) -> Response<SimBody> {
    match builder.body(body) {
        Ok(response) => response,
        Err(error) => {
            tracing::error!(%error, "rein sim: could not build a response");
            let mut response = Response::new(SimBody::empty());
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

/// The content type of a streamed answer: SSE, or AWS event-stream frames for Bedrock.
fn stream_content_type(format: WireFormat) -> &'static str {
    match format {
        WireFormat::OpenAi | WireFormat::Anthropic | WireFormat::Gemini => {
            "text/event-stream; charset=utf-8"
        }
        WireFormat::Bedrock => crate::bedrock::EVENT_STREAM,
    }
}

/// Any other path: the provider's 404, logged like every request.
pub(crate) fn not_found(shared: &Shared, format: WireFormat, req: &Incoming) -> Reply {
    let (elapsed, unix_ms) = shared.now();
    let (id_header, request_id) = wire::request_id(format, shared.next_id());
    let entry = new_entry(req, None, elapsed, unix_ms, &request_id);
    let replier = Replier {
        shared,
        format,
        responses: false,
        vertex: false,
        id_header,
        request_id,
        unix_s: unix_ms / 1000,
    };
    let body = match format {
        WireFormat::OpenAi => serde_json::json!({"error": {
            "message": format!("Invalid URL ({} {})", req.method, req.path),
            "type": "invalid_request_error",
            "param": null,
            "code": null
        }}),
        WireFormat::Anthropic => serde_json::json!({
            "type": "error",
            "error": {"type": "not_found_error", "message": "Not Found"},
            "request_id": replier.request_id
        }),
        WireFormat::Bedrock => serde_json::json!({"message": "Unknown operation"}),
        WireFormat::Gemini => serde_json::json!({"error": {
            "code": 404,
            "message": format!("Invalid URL ({} {})", req.method, req.path),
            "status": "NOT_FOUND"
        }}),
    };
    replier.send(entry, StatusCode::NOT_FOUND, &body, Vec::new())
}

/// The log entry of a request before its fault and status are known.
fn new_entry(
    req: &Incoming,
    format: Option<WireFormat>,
    elapsed: Duration,
    unix_ms: u64,
    request_id: &str,
) -> LogEntry {
    LogEntry {
        unix_ms,
        elapsed_ms: elapsed.as_millis() as u64,
        method: req.method.to_string(),
        path: req.path.clone(),
        format: format.map(|f| f.to_string()),
        model: None,
        stream: false,
        fault: "ok".to_owned(),
        fault_source: FaultSource::None,
        script: None,
        script_step: None,
        phase: None,
        reply_rule: None,
        sequence_key: sequence_key("", &Value::Null, &req.path),
        status: None,
        request_id: Some(request_id.to_owned()),
        idempotency_key: header(&req.headers, "idempotency-key"),
        client_request_id: header(&req.headers, "x-request-id"),
        auth_present: req.headers.contains_key("authorization")
            || req.headers.contains_key("x-api-key")
            || req.headers.contains_key("x-goog-api-key"),
    }
}
