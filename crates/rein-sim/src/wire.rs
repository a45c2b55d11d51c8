//! What the two wire formats have in common: a rendered answer is a body (non-streaming) or a
//! list of SSE [`Frame`]s (streaming), each frame tagged with the part it plays so that the
//! stream driver can apply faults by position ("after N content tokens", "before the first
//! token", "without the terminator") without knowing either format.

use bytes::Bytes;
use rein_core::WireFormat;
use serde_json::Value;

use crate::answer::Plan;
use crate::fault::ErrorFault;
use crate::request::SimRequest;
use crate::{anthropic, bedrock, gemini, openai};

/// One SSE frame, already serialised with its trailing blank line.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub bytes: Bytes,
    pub role: FrameRole,
}

/// The part a frame plays in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameRole {
    /// Sent as soon as it comes up: the opening frames, pings.
    Meta,
    /// Opens content without carrying a token (a tool call's id and name): the first-token
    /// delay applies before it.
    ContentStart,
    /// Carries one content token; `after=N` faults count these.
    Token,
    /// After the content: stop reason and usage.
    Tail,
    /// The stream's terminator (`[DONE]`, `message_stop`; Gemini has none).
    Terminator,
}

/// Per-response facts the renderers need beside the plan.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub request: &'a SimRequest,
    /// The provider-style id of this response (`chatcmpl-…`, `msg_…`).
    pub response_id: String,
    /// Unix seconds.
    pub created: u64,
    /// Bedrock's InvokeModel (Anthropic's body and events) rather than Converse.
    pub invoke: bool,
}

/// An error response: status, body and extra headers.
#[derive(Debug, Clone)]
pub(crate) struct WireError {
    pub status: u16,
    pub body: Value,
    pub headers: Vec<(&'static str, String)>,
}

pub(crate) fn sse_data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

pub(crate) fn sse_event(event: &str, value: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {value}\n\n"))
}

pub(crate) fn frame(bytes: Bytes, role: FrameRole) -> Frame {
    Frame { bytes, role }
}

/// The id of a response in this format, from a unique number.
pub(crate) fn response_id(format: WireFormat, unique: u64) -> String {
    match format {
        WireFormat::OpenAi => format!("chatcmpl-sim{unique:024x}"),
        WireFormat::Anthropic => format!("msg_sim{unique:020x}"),
        WireFormat::Bedrock => String::new(),
        WireFormat::Gemini => format!("sim{unique:020x}"),
    }
}

/// The request id header of this format and a value for it.
pub(crate) fn request_id(format: WireFormat, unique: u64) -> (&'static str, String) {
    match format {
        WireFormat::OpenAi => ("x-request-id", format!("req_sim{unique:025x}")),
        WireFormat::Anthropic => ("request-id", format!("req_sim{unique:020x}")),
        WireFormat::Bedrock => ("x-amzn-requestid", format!("sim-{unique:032x}")),
        WireFormat::Gemini => ("x-request-id", format!("req_sim{unique:020x}")),
    }
}

pub(crate) fn body(format: WireFormat, ctx: &Ctx<'_>, plan: &Plan) -> Value {
    match format {
        WireFormat::OpenAi => openai::body(ctx, plan),
        WireFormat::Anthropic => anthropic::body(ctx, plan),
        WireFormat::Bedrock => bedrock::body(ctx, plan),
        WireFormat::Gemini => gemini::body(ctx, plan),
    }
}

pub(crate) fn frames(format: WireFormat, ctx: &Ctx<'_>, plan: &Plan) -> Vec<Frame> {
    match format {
        WireFormat::OpenAi => openai::frames(ctx, plan),
        WireFormat::Anthropic => anthropic::frames(ctx, plan),
        WireFormat::Bedrock => bedrock::frames(ctx, plan),
        WireFormat::Gemini => gemini::frames(ctx, plan),
    }
}

/// A data line that is not valid JSON, shaped like a content delta cut mid-way.
pub(crate) fn malformed_frame(format: WireFormat, ctx: &Ctx<'_>) -> Bytes {
    match format {
        WireFormat::OpenAi => openai::malformed_frame(ctx),
        WireFormat::Anthropic => anthropic::malformed_frame(),
        WireFormat::Bedrock => bedrock::malformed_frame(ctx),
        WireFormat::Gemini => gemini::malformed_frame(ctx),
    }
}

/// The provider's in-stream error event.
pub(crate) fn stream_error_frame(format: WireFormat) -> Bytes {
    match format {
        WireFormat::OpenAi => openai::stream_error_frame(),
        WireFormat::Anthropic => anthropic::stream_error_frame(),
        WireFormat::Bedrock => bedrock::stream_error_frame(),
        WireFormat::Gemini => gemini::stream_error_frame(),
    }
}

pub(crate) fn error(
    format: WireFormat,
    fault: &ErrorFault,
    model: &str,
    request_id: &str,
    unix_s: u64,
) -> WireError {
    let mut error = match format {
        WireFormat::OpenAi => openai::error(fault, model),
        WireFormat::Anthropic => anthropic::error(fault, model, request_id, unix_s),
        WireFormat::Bedrock => bedrock::error(fault, model),
        WireFormat::Gemini => gemini::error(fault, model),
    };
    if let Some(status) = fault.status {
        error.status = status;
    }
    // Google asks for a wait in the body's `RetryInfo`, never in a header.
    if let Some(secs) = fault.retry_after.as_ref().filter(|_| format != WireFormat::Gemini) {
        error.headers.push(("retry-after", secs.clone()));
    }
    if let Some(ms) = fault.retry_after_ms {
        error.headers.push(("retry-after-ms", ms.to_string()));
    }
    if let Some(retry) = fault.should_retry {
        error.headers.push(("x-should-retry", retry.to_string()));
    }
    error
}

/// The `GET /v1/models` body of this format.
pub(crate) fn models(format: WireFormat, unix_s: u64) -> Value {
    match format {
        WireFormat::OpenAi => openai::models(unix_s),
        WireFormat::Anthropic => anthropic::models(),
        WireFormat::Bedrock => bedrock::models(),
        WireFormat::Gemini => gemini::models(),
    }
}

/// The models the simulator lists. Any model name is accepted in requests.
pub(crate) const MODELS: &[&str] = &["sim-small", "sim-large"];
