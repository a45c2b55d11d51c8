//! OpenAI's Responses API as an upstream (`api = "responses"`): the canonical request becomes a
//! `POST {base_url}/responses` body ([`request`]), the `response` object of a non-streaming
//! answer and the typed SSE stream (`response.created`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, `response.completed`, ...) become rein's events
//! ([`response`], [`stream`]). Error bodies are the same OpenAI error objects as Chat
//! Completions; a `response.failed` or `error` event mid-stream carries a code
//! (`server_error`, `rate_limit_exceeded`, `invalid_prompt`, ...) that classifies like its
//! HTTP equivalent. This module shares nothing with the gateway's caller-facing Responses
//! translation but rein-core's canonical types.

mod request;
mod response;
mod stream;

use rein_core::{Failure, StreamEvent};

pub(crate) use request::{build_body, unsendable};
pub(crate) use response::parse_response;
pub(crate) use stream::ResponsesDecoder;

/// Decodes a recorded Responses API SSE body as a live stream would be decoded.
pub fn replay_responses_stream(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_sse(body, ResponsesDecoder::default())
}

/// Decodes a recorded non-streaming Responses API body (a `response` object) into the events
/// it stands for.
pub fn replay_responses_response(body: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    crate::stream::replay_json(body, parse_response)
}
