//! The fault matrix: one row per fault, run through one `check` helper on paused time. Each row
//! says what the primary and the fallback tier do and what must come out: the outcome, the
//! attempts per tier and the virtual time the call took. Defaults are the spec's: deadline 20 s,
//! first token 4 s, idle 2 s, attempt 8 s, two attempts per tier; jitter is fixed at 0.5, so the
//! first backoff is 100 ms + 0.5 × 400 ms = 300 ms.

use std::time::Duration;

use rein_core::*;

use crate::support::*;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Answered,
    Fallback,
    Degraded,
    ContentPolicy,
    ContextLength,
}

struct Row {
    name: &'static str,
    primary: Vec<Act>,
    fallback: Vec<Act>,
    expect: Expect,
    /// Attempts on (primary, fallback).
    attempts: (usize, usize),
    elapsed_ms: u64,
    /// Alerts raised (permanent tier failures).
    alerts: usize,
    /// The stop reason of the answer, when one is expected.
    stop: Option<StopReason>,
    /// Context windows of (primary, fallback), when the row needs them.
    windows: Option<(u32, u32)>,
    /// The caller's deadline, when the row shortens it.
    deadline_ms: Option<u64>,
    /// The primary tier's wire format (OpenAI unless the row says otherwise).
    format: WireFormat,
}

const fn row(name: &'static str, expect: Expect, attempts: (usize, usize), elapsed_ms: u64) -> Row {
    Row {
        name,
        primary: Vec::new(),
        fallback: Vec::new(),
        expect,
        attempts,
        elapsed_ms,
        alerts: 0,
        stop: None,
        windows: None,
        deadline_ms: None,
        format: WireFormat::OpenAi,
    }
}

impl Row {
    fn scripts(mut self, primary: Vec<Act>, fallback: Vec<Act>) -> Self {
        self.primary = primary;
        self.fallback = fallback;
        self
    }
    fn alerts(mut self, n: usize) -> Self {
        self.alerts = n;
        self
    }
    fn stop(mut self, reason: StopReason) -> Self {
        self.stop = Some(reason);
        self
    }
    fn windows(mut self, primary: u32, fallback: u32) -> Self {
        self.windows = Some((primary, fallback));
        self
    }
    fn deadline(mut self, ms: u64) -> Self {
        self.deadline_ms = Some(ms);
        self
    }
    /// The primary tier's errors are Anthropic's (Claude on Vertex AI can answer with them).
    fn anthropic(mut self) -> Self {
        self.format = WireFormat::Anthropic;
        self
    }
    /// The primary tier speaks Gemini, so its errors are read as Google's.
    fn gemini(mut self) -> Self {
        self.format = WireFormat::Gemini;
        self
    }
    /// The primary tier is on Bedrock, so its errors are read by their `x-amzn-ErrorType`.
    fn bedrock(mut self) -> Self {
        self.format = WireFormat::Bedrock;
        self
    }
}

/// A Bedrock error as the adapter reads it: the type from `x-amzn-ErrorType`, the body's message.
fn bedrock_error(status: u16, error_type: &str, message: &str) -> Act {
    http(status, error_type, None, message)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Google's 429: `RESOURCE_EXHAUSTED`, the quota's id as the code, RetryInfo's delay as the wait.
fn gemini_rate_limit(quota_id: &str, wait: Option<Duration>) -> Act {
    Act::Http(HttpError {
        status: 429,
        error_type: Some("RESOURCE_EXHAUSTED".into()),
        code: Some(quota_id.into()),
        message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.".into(),
        retry_after: wait,
        ..HttpError::default()
    })
}

/// The Responses API's `response.failed` after `n` tokens, with this code and OpenAI's
/// message for it.
fn failed_after(n: usize, code: &'static str) -> Act {
    let message = match code {
        "image_content_policy_violation" => {
            "Your input image was rejected by our safety system as it may contain content that is not allowed."
        }
        "invalid_image_url" => "Error while downloading the image at the given URL.",
        _ => "The model failed to generate a response.",
    };
    Act::ResponseFailedAfter(n, code, message)
}

fn slow_stream(gap_ms: u64) -> Act {
    Act::Ok { first_token: Duration::ZERO, token_delay: ms(gap_ms) }
}

fn rows() -> Vec<Row> {
    use Expect::*;
    vec![
        row("healthy", Answered, (1, 0), 0).scripts(vec![ok()], vec![ok()]),
        row("529 once then ok", Answered, (2, 0), 300).scripts(vec![status(529), ok()], vec![ok()]),
        row("503 once then ok", Answered, (2, 0), 300).scripts(vec![status(503), ok()], vec![ok()]),
        row("500 once then ok", Answered, (2, 0), 300).scripts(vec![status(500), ok()], vec![ok()]),
        row("408 once then ok", Answered, (2, 0), 300).scripts(vec![status(408), ok()], vec![ok()]),
        row("409 once then ok", Answered, (2, 0), 300).scripts(vec![status(409), ok()], vec![ok()]),
        row("429 without retry-after then ok", Answered, (2, 0), 300)
            .scripts(vec![status(429), ok()], vec![ok()]),
        row("429 retry-after 2 s waits exactly 2 s", Answered, (2, 0), 2000)
            .scripts(vec![retry_after(429, ms(2000)), ok()], vec![ok()]),
        row("429 retry-after-ms 1500", Answered, (2, 0), 1500)
            .scripts(vec![retry_after(429, ms(1500)), ok()], vec![ok()]),
        row("retry-after beyond the deadline goes to the next tier at once", Fallback, (1, 1), 0)
            .scripts(vec![retry_after(429, ms(30_000)), ok()], vec![ok()]),
        row("persistent 529: bounded attempts, then the next tier", Fallback, (2, 1), 300)
            .scripts(vec![status(529)], vec![ok()]),
        row("persistent 503", Fallback, (2, 1), 300).scripts(vec![status(503)], vec![ok()]),
        row("persistent 429", Fallback, (2, 1), 300).scripts(vec![status(429)], vec![ok()]),
        row("insufficient_quota: no retry, next tier, alert", Fallback, (1, 1), 0)
            .scripts(
                vec![http(429, "insufficient_quota", Some("insufficient_quota"), "You exceeded your current quota, please check your plan and billing details.")],
                vec![ok()],
            )
            .alerts(1),
        row("Anthropic monthly spend cap 429: no retry", Fallback, (1, 1), 0)
            .scripts(
                vec![http(429, "rate_limit_error", None, "You have reached your specified workspace API usage limits. You will regain access on 2026-12-01 at 00:00 UTC.")],
                vec![ok()],
            )
            .alerts(1),
        row("Anthropic credit balance 400: no retry", Fallback, (1, 1), 0)
            .scripts(
                vec![http(400, "invalid_request_error", None, "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.")],
                vec![ok()],
            )
            .alerts(1),
        row("context length: no retry, the larger tier answers", Fallback, (1, 1), 0)
            .scripts(
                vec![http(400, "invalid_request_error", Some("context_length_exceeded"), "This model's maximum context length is 128000 tokens.")],
                vec![ok()],
            )
            .windows(128_000, 200_000),
        row("context length with no larger tier: the caller is told", ContextLength, (1, 0), 0)
            .scripts(
                vec![http(400, "invalid_request_error", None, "prompt is too long: 210000 tokens > 200000 maximum")],
                vec![ok()],
            )
            .windows(200_000, 128_000),
        row("content policy: no retry, the caller gets the reason", ContentPolicy, (1, 0), 0).scripts(
            vec![http(400, "invalid_request_error", Some("content_policy_violation"), "Your request was rejected as a result of our safety system: violence.")],
            vec![ok()],
        ),
        row("401 skips the tier and alerts", Fallback, (1, 1), 0).scripts(vec![status(401)], vec![ok()]).alerts(1),
        row("403 skips the tier and alerts", Fallback, (1, 1), 0).scripts(vec![status(403)], vec![ok()]).alerts(1),
        row("404 skips the tier and alerts", Fallback, (1, 1), 0).scripts(vec![status(404)], vec![ok()]).alerts(1),
        row("413 skips the tier and alerts", Fallback, (1, 1), 0).scripts(vec![status(413)], vec![ok()]).alerts(1),
        row("reset before headers then ok", Answered, (2, 0), 300).scripts(vec![Act::Reset, ok()], vec![ok()]),
        // 4 s first-token clock, 300 ms wait, 4 s again: the fallback starts at 8.3 s with 11.7 s left.
        row("silent provider: first-token clock, then the fallback", Fallback, (2, 1), 8300)
            .scripts(vec![Act::Hang], vec![ok()]),
        row("slow first token (6 s) is cut at 4 s", Fallback, (2, 1), 8300).scripts(
            vec![Act::Ok { first_token: ms(6000), token_delay: Duration::ZERO }],
            vec![ok()],
        ),
        row("slow first token within the clock is fine", Answered, (1, 0), 3000)
            .scripts(vec![Act::Ok { first_token: ms(3000), token_delay: Duration::ZERO }], vec![ok()]),
        // Tokens every 1.9 s: the attempt runs to its 8 s cap. A second one like it would end at
        // 16.3 s, too late for a full fallback attempt (the spec's loop sent the safe reply
        // then); the deadline is planned across the chain, so the fallback runs at once with
        // 12 s left. (With no fallback to run, the two attempts and the safe reply: see
        // `planning`.)
        row("slow stream runs to the attempt cap, then the fallback at once", Fallback, (1, 1), 8000)
            .scripts(vec![slow_stream(1900)], vec![ok()]),
        row("stream cut mid-answer is retried invisibly", Answered, (2, 0), 300)
            .scripts(vec![Act::CutAfter(3), ok()], vec![ok()]),
        row("stream stall trips the idle clock", Answered, (2, 0), 2300)
            .scripts(vec![Act::StallAfter(3), ok()], vec![ok()]),
        row("malformed chunk fails the attempt cleanly", Answered, (2, 0), 300)
            .scripts(vec![Act::MalformedAfter(2), ok()], vec![ok()]),
        row("mid-stream error event is retried", Answered, (2, 0), 300)
            .scripts(vec![Act::StreamErrorAfter(2), ok()], vec![ok()]),
        // The Responses API's `response.failed` codes classify like their HTTP equivalents.
        row("response.failed server_error is retried like a 500", Answered, (2, 0), 300)
            .scripts(vec![failed_after(2, "server_error"), ok()], vec![ok()]),
        row("response.failed rate_limit_exceeded is retried like a 429", Answered, (2, 0), 300)
            .scripts(vec![failed_after(0, "rate_limit_exceeded"), ok()], vec![ok()]),
        row("response.failed vector_store_timeout is retried like a timeout", Answered, (2, 0), 300)
            .scripts(vec![failed_after(0, "vector_store_timeout"), ok()], vec![ok()]),
        row("response.failed invalid_prompt: no retry, next tier, alert", Fallback, (1, 1), 0)
            .scripts(vec![failed_after(0, "invalid_prompt"), ok()], vec![ok()])
            .alerts(1),
        row("response.failed invalid_image_url: no retry, next tier, alert", Fallback, (1, 1), 0)
            .scripts(vec![failed_after(0, "invalid_image_url"), ok()], vec![ok()])
            .alerts(1),
        row("response.failed image_content_policy_violation stops", ContentPolicy, (1, 0), 0)
            .scripts(vec![failed_after(0, "image_content_policy_violation")], vec![ok()]),
        row("error event insufficient_quota: no retry, next tier, alert", Fallback, (1, 1), 0)
            .scripts(vec![failed_after(0, "insufficient_quota"), ok()], vec![ok()])
            .alerts(1),
        row("missing terminator, stream ends: finalised at once", Answered, (1, 0), 0)
            .scripts(vec![Act::NoDone { stall: false }], vec![ok()]),
        row("missing terminator, connection open: finalised at the idle clock", Answered, (1, 0), 2000)
            .scripts(vec![Act::NoDone { stall: true }], vec![ok()]),
        row("max_tokens stop is reported, never as complete", Answered, (1, 0), 0)
            .scripts(vec![Act::StopWith(StopReason::MaxTokens)], vec![ok()])
            .stop(StopReason::MaxTokens),
        row("refusal stop is reported", Answered, (1, 0), 0)
            .scripts(vec![Act::StopWith(StopReason::Refusal)], vec![ok()])
            .stop(StopReason::Refusal),
        // Gemini's documented errors, read by their google.rpc `status`; the messages are
        // Google's own.
        row("Gemini RESOURCE_EXHAUSTED with RetryInfo 2 s waits exactly 2 s", Answered, (2, 0), 2000)
            .scripts(vec![gemini_rate_limit("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", Some(ms(2000))), ok()], vec![ok()])
            .gemini(),
        row("Gemini RESOURCE_EXHAUSTED with RetryInfo 58 s: the next tier at once", Fallback, (1, 1), 0)
            .scripts(vec![gemini_rate_limit("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", Some(ms(58_000))), ok()], vec![ok()])
            .gemini(),
        row("Gemini per-day quota: no retry, next tier, alert", Fallback, (1, 1), 0)
            .scripts(vec![gemini_rate_limit("GenerateRequestsPerDayPerProjectPerModel", None)], vec![ok()])
            .gemini()
            .alerts(1),
        row("Gemini UNAVAILABLE once then ok", Answered, (2, 0), 300)
            .scripts(vec![http(503, "UNAVAILABLE", None, "The model is overloaded. Please try again later."), ok()], vec![ok()])
            .gemini(),
        row("Gemini persistent UNAVAILABLE: the next tier", Fallback, (2, 1), 300)
            .scripts(vec![http(503, "UNAVAILABLE", None, "The model is overloaded. Please try again later.")], vec![ok()])
            .gemini(),
        row("Gemini INTERNAL once then ok", Answered, (2, 0), 300)
            .scripts(vec![http(500, "INTERNAL", None, "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"), ok()], vec![ok()])
            .gemini(),
        row("Gemini DEADLINE_EXCEEDED once then ok", Answered, (2, 0), 300)
            .scripts(vec![http(504, "DEADLINE_EXCEEDED", None, "Deadline expired before operation could complete."), ok()], vec![ok()])
            .gemini(),
        row("Gemini API_KEY_INVALID 400 skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(400, "INVALID_ARGUMENT", Some("API_KEY_INVALID"), "API key not valid. Please pass a valid API key.")], vec![ok()])
            .gemini()
            .alerts(1),
        row("Gemini PERMISSION_DENIED skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(403, "PERMISSION_DENIED", None, "You do not have permission to access the requested resource.")], vec![ok()])
            .gemini()
            .alerts(1),
        row("Gemini NOT_FOUND skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(404, "NOT_FOUND", None, "models/gemini-9 is not found for API version v1beta, or is not supported for generateContent.")], vec![ok()])
            .gemini()
            .alerts(1),
        row("Gemini FAILED_PRECONDITION (billing) skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(400, "FAILED_PRECONDITION", None, "Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio.")], vec![ok()])
            .gemini()
            .alerts(1),
        row("Gemini input token count: the larger tier answers", Fallback, (1, 1), 0)
            .scripts(vec![http(400, "INVALID_ARGUMENT", None, "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).")], vec![ok()])
            .gemini()
            .windows(1_048_576, 2_000_000),
        // A plain INVALID_ARGUMENT (the message of the recorded body in the fixtures): the tier
        // rejects this request as it is, so it is never retried there.
        row("Gemini INVALID_ARGUMENT (invalid request) skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(400, "INVALID_ARGUMENT", None, "Request contains an invalid argument.")], vec![ok()])
            .gemini()
            .alerts(1),
        // Bedrock's documented errors (Converse and InvokeModel alike), read by their type: the
        // statuses are shared (429 is a throttle or a model still loading, 400 a validation
        // failure or a quota, 403 a denied model or an expired token) and would mislead alone.
        row("Bedrock ThrottlingException once then ok", Answered, (2, 0), 300)
            .scripts(vec![bedrock_error(429, "ThrottlingException", "Too many requests, please wait before trying again."), ok()], vec![ok()])
            .bedrock(),
        row("Bedrock persistent ThrottlingException: the next tier", Fallback, (2, 1), 300)
            .scripts(vec![bedrock_error(429, "ThrottlingException", "Too many requests, please wait before trying again.")], vec![ok()])
            .bedrock(),
        row("Bedrock ServiceUnavailableException once then ok", Answered, (2, 0), 300)
            .scripts(vec![bedrock_error(503, "ServiceUnavailableException", "Bedrock is unable to process your request."), ok()], vec![ok()])
            .bedrock(),
        row("Bedrock ModelNotReadyException (429) once then ok", Answered, (2, 0), 300)
            .scripts(vec![bedrock_error(429, "ModelNotReadyException", "Model is not ready for inference. Wait and try your request again."), ok()], vec![ok()])
            .bedrock(),
        row("Bedrock ModelTimeoutException once then ok", Answered, (2, 0), 300)
            .scripts(vec![bedrock_error(408, "ModelTimeoutException", "The request took too long to process. Processing time exceeded the model timeout length."), ok()], vec![ok()])
            .bedrock(),
        row("Bedrock ModelErrorException (424) once then ok", Answered, (2, 0), 300)
            .scripts(vec![bedrock_error(424, "ModelErrorException", "The request failed due to an error while processing the model."), ok()], vec![ok()])
            .bedrock(),
        row("Bedrock InternalServerException once then ok", Answered, (2, 0), 300)
            .scripts(vec![bedrock_error(500, "InternalServerException", "The system encountered an unexpected error during processing. Try your request again."), ok()], vec![ok()])
            .bedrock(),
        row("Bedrock ValidationException input too long: the larger tier answers", Fallback, (1, 1), 0)
            .scripts(vec![bedrock_error(400, "ValidationException", "Input is too long for requested model.")], vec![ok()])
            .bedrock()
            .windows(200_000, 1_000_000),
        row("Bedrock ValidationException prompt too long with no larger tier: the caller is told", ContextLength, (1, 0), 0)
            .scripts(vec![bedrock_error(400, "ValidationException", "prompt is too long: 210000 tokens > 200000 maximum")], vec![ok()])
            .bedrock()
            .windows(200_000, 128_000),
        row("Bedrock ValidationException otherwise skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![bedrock_error(400, "ValidationException", "messages: roles must alternate between \"user\" and \"assistant\", but found multiple \"user\" roles in a row")], vec![ok()])
            .bedrock()
            .alerts(1),
        row("Bedrock AccessDeniedException skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![bedrock_error(403, "AccessDeniedException", "You don't have access to the model with the specified model ID.")], vec![ok()])
            .bedrock()
            .alerts(1),
        row("Bedrock ServiceQuotaExceededException (400): no retry, next tier, alert", Fallback, (1, 1), 0)
            .scripts(vec![bedrock_error(400, "ServiceQuotaExceededException", "Your request exceeded the quota for this account.")], vec![ok()])
            .bedrock()
            .alerts(1),
        row("Bedrock expired token 403 skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![bedrock_error(403, "ExpiredTokenException", "The security token included in the request is expired")], vec![ok()])
            .bedrock()
            .alerts(1),
        row("Bedrock throttlingException frame mid-stream is retried", Answered, (2, 0), 300)
            .scripts(vec![Act::StreamErrorTypedAfter(2, "throttlingException", "Too many tokens, please wait before trying again."), ok()], vec![ok()])
            .bedrock(),
        row("Bedrock modelStreamErrorException frame mid-stream is retried", Answered, (2, 0), 300)
            .scripts(vec![Act::StreamErrorTypedAfter(2, "modelStreamErrorException", "The model stream failed."), ok()], vec![ok()])
            .bedrock(),
        row("Bedrock internalServerException frame mid-stream is retried like a 500", Answered, (2, 0), 300)
            .scripts(vec![Act::StreamErrorTypedAfter(2, "internalServerException", "The system encountered an unexpected error during processing. Try your request again."), ok()], vec![ok()])
            .bedrock(),
        // A request Bedrock refuses mid-stream is refused again on the same tier: the next one.
        row("Bedrock validationException frame mid-stream: no retry, next tier, alert", Fallback, (1, 1), 0)
            .scripts(vec![Act::StreamErrorTypedAfter(2, "validationException", "messages: roles must alternate between \"user\" and \"assistant\"")], vec![ok()])
            .bedrock()
            .alerts(1),
        row("Bedrock validationException frame mid-stream, input too long: the larger tier", Fallback, (1, 1), 0)
            .scripts(vec![Act::StreamErrorTypedAfter(2, "validationException", "Input is too long for requested model.")], vec![ok()])
            .bedrock()
            .windows(200_000, 1_000_000),
        // Vertex AI answers Google's bodies for Claude and Gemini alike (the adapter reports them
        // in the Gemini format), and Claude's own 529; a failed token fetch is OAuth's error.
        row("Vertex RESOURCE_EXHAUSTED with RetryInfo 3 s waits exactly 3 s", Answered, (2, 0), 3000)
            .scripts(vec![Act::Http(HttpError { status: 429, error_type: Some("RESOURCE_EXHAUSTED".into()), message: "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.".into(), retry_after: Some(ms(3000)), ..HttpError::default() }), ok()], vec![ok()])
            .gemini(),
        row("Vertex per-minute base-model quota (Claude) once then ok", Answered, (2, 0), 300)
            .scripts(vec![http(429, "RESOURCE_EXHAUSTED", None, "Quota exceeded for aiplatform.googleapis.com/online_prediction_input_tokens_per_minute_per_base_model with base model: anthropic-claude-3-7-sonnet. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai."), ok()], vec![ok()])
            .gemini(),
        row("Claude on Vertex 529 overloaded_error once then ok", Answered, (2, 0), 300)
            .scripts(vec![http(529, "overloaded_error", None, "Overloaded"), ok()], vec![ok()])
            .anthropic(),
        row("Vertex UNAVAILABLE 503 persistent: the next tier", Fallback, (2, 1), 300)
            .scripts(vec![http(503, "UNAVAILABLE", None, "The service is currently unavailable.")], vec![ok()])
            .gemini(),
        row("Vertex UNAUTHENTICATED 401 skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(401, "UNAUTHENTICATED", Some("ACCESS_TOKEN_EXPIRED"), "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")], vec![ok()])
            .gemini()
            .alerts(1),
        row("Vertex PERMISSION_DENIED skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(403, "PERMISSION_DENIED", None, "Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4' (or it may not exist).")], vec![ok()])
            .gemini()
            .alerts(1),
        row("Vertex INVALID_ARGUMENT skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(400, "INVALID_ARGUMENT", None, "Request contains an invalid argument.")], vec![ok()])
            .gemini()
            .alerts(1),
        row("Vertex token fetch refused (invalid_grant) skips the tier and alerts", Fallback, (1, 1), 0)
            .scripts(vec![http(400, "invalid_grant", None, "the token endpoint https://oauth2.googleapis.com/token (service account sa@p.iam.gserviceaccount.com) refused the token request (HTTP 400): invalid_grant: Invalid JWT Signature.")], vec![ok()])
            .anthropic()
            .alerts(1),
        // An unreachable token endpoint fails the attempt as a connection failure (a reset here).
        row("Vertex token endpoint unreachable once then ok", Answered, (2, 0), 300)
            .scripts(vec![Act::Reset, ok()], vec![ok()]),
        row("every tier down: the degraded reply", Degraded, (2, 2), 600)
            .scripts(vec![status(503)], vec![status(503)]),
        row("x-should-retry false: next tier", Fallback, (1, 1), 0).scripts(
            vec![Act::Http(HttpError { status: 500, should_retry: Some(false), message: "no".into(), ..HttpError::default() })],
            vec![ok()],
        ),
        row("short caller deadline still gets one attempt", Degraded, (1, 0), 3000)
            .scripts(vec![Act::Hang], vec![ok()])
            .deadline(3000),
    ]
}

async fn check(row: Row) {
    let primary = Scripted::new("p", row.format, row.primary.clone());
    let fallback = Scripted::new("f", WireFormat::Anthropic, row.fallback.clone());
    let mut route = route("r", vec![("primary", primary.clone()), ("fallback", fallback.clone())]);
    if let Some((p, f)) = row.windows {
        route.tiers[0].context_window = Some(p);
        route.tiers[1].context_window = Some(f);
    }
    let engine = engine(vec![route]);
    let ctx = row.deadline_ms.map_or_else(CallContext::new, |d| CallContext::with_deadline(ms(d)));
    let started = tokio::time::Instant::now();
    let result = engine.complete(ctx, "r", ChatRequest::default()).await;
    let elapsed = started.elapsed();
    let name = row.name;

    assert_eq!(elapsed, ms(row.elapsed_ms), "{name}: virtual elapsed time");
    assert!(elapsed <= ms(row.deadline_ms.unwrap_or(20_000)), "{name}: inside the deadline");
    assert_eq!(
        (primary.arrivals().len(), fallback.arrivals().len()),
        row.attempts,
        "{name}: attempts seen by the providers"
    );
    for arrivals in [primary.arrivals(), fallback.arrivals()] {
        for pair in arrivals.windows(2) {
            assert!(
                pair[1] - pair[0] >= ms(100),
                "{name}: two attempts within 100 ms: {arrivals:?}"
            );
        }
    }
    let report = match (&result, row.expect) {
        (Ok(done), Expect::Answered) => {
            assert_eq!(done.outcome(), Outcome::Answered, "{name}");
            &done.report
        }
        (Ok(done), Expect::Fallback) => {
            assert_eq!(done.outcome(), Outcome::Fallback, "{name}");
            assert_eq!(done.report.served_by.as_ref().map(|s| s.tier), Some(1), "{name}");
            &done.report
        }
        (Ok(done), Expect::Degraded) => {
            assert_eq!(done.outcome(), Outcome::Degraded, "{name}");
            assert_eq!(done.response.model, "rein-degraded");
            &done.report
        }
        (Err(CallError::ContentPolicy { reason, report }), Expect::ContentPolicy) => {
            assert!(
                reason.contains("safety system"),
                "{name}: the provider's reason reaches the caller: {reason}"
            );
            report
        }
        (Err(CallError::ContextLength { report, .. }), Expect::ContextLength) => report,
        (other, expect) => panic!("{name}: expected {expect:?}, got {other:?}"),
    };
    assert_eq!(
        (report.attempts_on(0), report.attempts_on(1)),
        row.attempts,
        "{name}: attempts in the report"
    );
    assert_eq!(report.alerts.len(), row.alerts, "{name}: alerts");
    if let Ok(done) = &result {
        match (&row.stop, done.outcome()) {
            (Some(reason), _) => {
                assert_eq!(done.response.stop_reason.as_ref(), Some(reason), "{name}")
            }
            (None, Outcome::Answered | Outcome::Fallback) => {
                assert_eq!(
                    done.response.text,
                    full_text(),
                    "{name}: the whole answer, never a truncated one"
                );
                assert_eq!(done.response.stop_reason, Some(StopReason::EndTurn), "{name}");
            }
            _ => {}
        }
    }
}

#[tokio::test(start_paused = true)]
async fn fault_matrix() {
    let rows = rows();
    assert!(rows.len() >= 35);
    for row in rows {
        check(row).await;
    }
}
