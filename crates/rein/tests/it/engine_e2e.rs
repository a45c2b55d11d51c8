//! The engine end to end over real HTTP: rein-core's chain of tiers with the real OpenAI,
//! Anthropic and Bedrock adapters of rein-providers, against an in-process `rein sim` on 127.0.0.1:0. Every
//! row gets its own simulator and engine, and runs on real clocks with short budgets (first
//! token 1 s, idle 500 ms, attempt 2 s, deadline 5 s: wide enough that a loaded two-core machine
//! never trips them on a healthy answer; backoff floor 10 ms, base 20 ms, jitter fixed at 0.5, so
//! every backoff is 15 ms). A row names the primary tier's fault (its model is `sim:<spec>`),
//! the wire format, how the call is made, and what must come out: the outcome and the answer,
//! the attempts per tier as the report counts them *and* as the simulator's own log saw them, the
//! kind of the first failure (a clock's only after the clock's time), and timing read from the
//! simulator's log (a retry never arrives sooner than the wait the report says it took, so a
//! server's `retry-after` is honoured to the millisecond). Rows run concurrently; a failure lists
//! every row that broke.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use rein_core::report::ReaskReason;
use rein_core::validate::OutputContract;
use rein_core::*;
use rein_providers::{
    AnthropicConfig, BedrockApi, BedrockConfig, GeminiConfig, HttpClient, HttpClientConfig,
    OpenAiConfig, ProviderConfig, Secret, build_provider,
};
use rein_sim::{LogEntry, SENTINEL, SimConfig, say_spec};
use serde_json::{Value, json};
use tokio::time::Instant;

const OPENAI: WireFormat = WireFormat::OpenAi;
const ANTHROPIC: WireFormat = WireFormat::Anthropic;
const GEMINI: WireFormat = WireFormat::Gemini;
const BEDROCK: WireFormat = WireFormat::Bedrock;

/// The backoff floor, and the one backoff wait the fixed jitter gives: 10 + 0.5 × (20 − 10).
const FLOOR_MS: u64 = 10;
const BACKOFF_MS: u64 = 15;
/// Room for scheduling on a loaded machine on top of the deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(1000);
/// Rows in flight at once, per test.
const CONCURRENT_ROWS: usize = 8;

const FIRST_TOKEN_MS: u64 = 1000;
const IDLE_MS: u64 = 500;

const PROMPT: &str = "Where is order 1234, and when will it arrive?";
const PREFILL: &str = "Order 1234 is";
const FALLBACK_MODEL: &str = "sim-fallback";
/// What `say:` answers say.
const SAID: &str = "Order 1234 ships on Friday.";
const SAID_JSON: &str = r#"{"order":1234,"ships":"Friday"}"#;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn clocks(patient: bool) -> ClockPolicy {
    if patient {
        // Idle and attempt clocks far beyond what the row allows itself, so an answer that
        // finishes in time can only have been finalised by the stream's own end.
        ClockPolicy {
            first_token: ms(2000),
            stream_idle: ms(4000),
            attempt: ms(4500),
            deadline: ms(5000),
            min_attempt: ms(4500),
        }
    } else {
        ClockPolicy {
            first_token: ms(FIRST_TOKEN_MS),
            stream_idle: ms(IDLE_MS),
            attempt: ms(2000),
            deadline: ms(5000),
            min_attempt: ms(2000),
        }
    }
}

fn retry_policy() -> RetryPolicy {
    RetryPolicy { attempts: 2, base: ms(20), cap: ms(200), floor: ms(FLOOR_MS) }
}

/// How the call is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `Engine::complete`, the adapters streaming from the provider.
    Complete,
    /// `Engine::complete`, the adapters asking for whole (non-streaming) answers.
    Whole,
    /// `Engine::stream` on a checked route.
    Checked,
    /// `Engine::stream` on a passthrough route.
    Passthrough,
}

/// How the call must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The primary tier answered.
    Answered,
    /// The fallback tier answered.
    Fallback,
    /// No tier answered: the route's degraded reply.
    Degraded,
    /// `CallError::ContentPolicy` whose reason carries these words of the provider's.
    ContentPolicy(&'static str),
    /// `CallError::ContextLength`: no tier's window is large enough.
    ContextLength,
    /// A passthrough stream failed after this many tokens reached the caller.
    Interrupted(usize),
    /// The model refused and the validation ladder sent the route's safe reply.
    Declined,
}

/// What the answer's text must be, when a model answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Text {
    /// The simulator's whole healthy answer (ending with the sentinel, unless JSON was asked),
    /// with the usage of that answer alone.
    Whole,
    /// Cut at the token ceiling: a strict prefix of the healthy answer, reported as `MaxTokens`.
    MaxTokens,
    /// The model declined.
    Refusal,
    /// The JSON answer, its fence stripped by a code repair.
    Repaired,
    /// Exactly this (a `say:` answer).
    Exactly(&'static str),
}

/// The conversation sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prompt {
    Plain,
    /// Ends with an assistant prefill.
    Prefill,
    /// Asks for a JSON object.
    Json,
    /// Sets its own ceiling: `max_tokens` 64, more than any healthy text answer needs.
    Ceiling,
}

#[derive(Debug, Clone)]
struct Row {
    name: &'static str,
    format: WireFormat,
    /// The primary tier's fault spec; its model is `sim:<spec>`.
    spec: String,
    fallback_format: WireFormat,
    fallback_model: &'static str,
    mode: Mode,
    expect: Expect,
    /// Attempts on (primary, fallback).
    attempts: (usize, usize),
    /// The kind of the primary's first failure; `None` when its first attempt answered.
    kind: Option<FailureKind>,
    alerts: usize,
    text: Text,
    prompt: Prompt,
    /// Context windows of (primary, fallback).
    windows: Option<(u32, u32)>,
    /// The server's `retry-after` that must set the primary's wait.
    pushback_ms: Option<u64>,
    min_elapsed_ms: u64,
    max_elapsed_ms: Option<u64>,
    patient: bool,
    /// The route's output contract (the validation ladder); `None` accepts any whole answer.
    contract: Option<OutputContract>,
    /// Answers asked for again by the ladder.
    reasks: usize,
    /// Bedrock tiers speak InvokeModel (`api = invoke`) rather than Converse.
    invoke: bool,
}

fn row(
    name: &'static str,
    format: WireFormat,
    spec: impl Into<String>,
    expect: Expect,
    attempts: (usize, usize),
) -> Row {
    Row {
        name,
        format,
        spec: spec.into(),
        fallback_format: format,
        fallback_model: FALLBACK_MODEL,
        mode: Mode::Complete,
        expect,
        attempts,
        kind: None,
        alerts: 0,
        text: Text::Whole,
        prompt: Prompt::Plain,
        windows: None,
        pushback_ms: None,
        min_elapsed_ms: 0,
        max_elapsed_ms: None,
        patient: false,
        contract: None,
        reasks: 0,
        invoke: false,
    }
}

fn openai(
    name: &'static str,
    spec: impl Into<String>,
    expect: Expect,
    attempts: (usize, usize),
) -> Row {
    row(name, OPENAI, spec, expect, attempts)
}

fn anthropic(
    name: &'static str,
    spec: impl Into<String>,
    expect: Expect,
    attempts: (usize, usize),
) -> Row {
    row(name, ANTHROPIC, spec, expect, attempts)
}

fn gemini(
    name: &'static str,
    spec: impl Into<String>,
    expect: Expect,
    attempts: (usize, usize),
) -> Row {
    row(name, GEMINI, spec, expect, attempts)
}

impl Row {
    fn kind(mut self, kind: FailureKind) -> Self {
        self.kind = Some(kind);
        self
    }
    fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    fn invoke(mut self) -> Self {
        self.invoke = true;
        self
    }
    fn fallback(mut self, format: WireFormat, model: &'static str) -> Self {
        self.fallback_format = format;
        self.fallback_model = model;
        self
    }
    fn alerts(mut self, n: usize) -> Self {
        self.alerts = n;
        self
    }
    fn text(mut self, text: Text) -> Self {
        self.text = text;
        self
    }
    fn prompt(mut self, prompt: Prompt) -> Self {
        self.prompt = prompt;
        self
    }
    fn windows(mut self, primary: u32, fallback: u32) -> Self {
        self.windows = Some((primary, fallback));
        self
    }
    fn pushback(mut self, ms: u64) -> Self {
        self.pushback_ms = Some(ms);
        self.min_elapsed_ms = ms;
        self
    }
    fn min_elapsed(mut self, ms: u64) -> Self {
        self.min_elapsed_ms = ms;
        self
    }
    fn max_elapsed(mut self, ms: u64) -> Self {
        self.max_elapsed_ms = Some(ms);
        self
    }
    fn patient(mut self) -> Self {
        self.patient = true;
        self
    }
    fn contract(mut self, contract: OutputContract) -> Self {
        self.contract = Some(contract);
        self
    }
    fn reasks(mut self, n: usize) -> Self {
        self.reasks = n;
        self
    }
}

use Expect::*;
use FailureKind as K;

const FIRST_TOKEN: FailureKind = FailureKind::ClockFired(Clock::FirstToken);
const IDLE: FailureKind = FailureKind::ClockFired(Clock::StreamIdle);

/// Every fault of the simulator through the OpenAI adapter, streaming.
#[rustfmt::skip]
fn openai_rows() -> Vec<Row> {
    vec![
        openai("healthy", "ok", Answered, (1, 0)),
        openai("529 then ok: the primary answers on its second attempt", "529,ok", Answered, (2, 0)).kind(K::Overloaded),
        openai("persistent 529: two attempts, then the fallback", "529", Fallback, (2, 1)).kind(K::Overloaded),
        openai("503 then ok", "503,ok", Answered, (2, 0)).kind(K::Overloaded),
        openai("500 then ok", "500,ok", Answered, (2, 0)).kind(K::ServerError),
        openai("persistent 500", "500", Fallback, (2, 1)).kind(K::ServerError),
        openai("408 then ok", "408,ok", Answered, (2, 0)).kind(K::RequestTimeout),
        openai("409 then ok", "409,ok", Answered, (2, 0)).kind(K::Conflict),
        openai("429 whose body says try again in 1s: the body's wait, then ok", "429,ok", Answered, (2, 0))
            .kind(K::RateLimited).pushback(1000),
        openai("429 whose body says try again in 20s, 5 s left: the fallback at once", "429:try_again=20s", Fallback, (1, 1))
            .kind(K::RateLimited),
        openai("429 retry-after 1 s: the retry waits the server's second", "429:retry_after=1", Fallback, (2, 1))
            .kind(K::RateLimited).pushback(1000),
        openai("429 retry-after-ms 400 then ok", "429:retry_after_ms=400,ok", Answered, (2, 0))
            .kind(K::RateLimited).pushback(400),
        openai("429 retry-after beyond the deadline: the fallback at once", "429:retry_after=9", Fallback, (1, 1))
            .kind(K::RateLimited),
        openai("500 with x-should-retry false: the next tier at once", "500:should_retry=false", Fallback, (1, 1))
            .kind(K::ServerError),
        openai("insufficient_quota: never retried, alert", "insufficient_quota", Fallback, (1, 1)).kind(K::QuotaExhausted).alerts(1),
        openai("spend cap: never retried, alert", "spend_cap", Fallback, (1, 1)).kind(K::QuotaExhausted).alerts(1),
        openai("401", "401", Fallback, (1, 1)).kind(K::Unauthorized).alerts(1),
        openai("403", "403", Fallback, (1, 1)).kind(K::Forbidden).alerts(1),
        openai("404", "404", Fallback, (1, 1)).kind(K::NotFound).alerts(1),
        openai("413", "413", Fallback, (1, 1)).kind(K::PayloadTooLarge).alerts(1),
        openai("context length: the larger-context tier answers", "context_length", Fallback, (1, 1))
            .kind(K::ContextLength).windows(128_000, 200_000),
        openai("context length, no larger tier: the caller is told", "context_length", ContextLength, (1, 0))
            .kind(K::ContextLength).windows(200_000, 128_000),
        openai("content policy: stop with the provider's reason", "content_policy:reason=violence", ContentPolicy("violence"), (1, 0))
            .kind(K::ContentPolicy),
        openai("prefill rejected: the next tier takes the request", "reject_prefill", Fallback, (1, 1))
            .kind(K::InvalidRequest).alerts(1).prompt(Prompt::Prefill),
        openai("reject_prefill without a prefill is healthy", "reject_prefill", Answered, (1, 0)),
        openai("reset before headers then ok", "reset,ok", Answered, (2, 0)).kind(K::ConnectionFailed),
        openai("persistent reset", "reset", Fallback, (2, 1)).kind(K::ConnectionFailed),
        openai("hang: the first-token clock, twice, then the fallback", "hang", Fallback, (2, 1))
            .kind(FIRST_TOKEN).min_elapsed(2 * FIRST_TOKEN_MS),
        openai("slow first token (1.5 s) is cut at 1 s", "slow_first_token:ms=1500", Fallback, (2, 1))
            .kind(FIRST_TOKEN).min_elapsed(2 * FIRST_TOKEN_MS),
        openai("slow first token within the clock is fine", "slow_first_token:ms=200", Answered, (1, 0)).min_elapsed(200),
        openai("tokens 800 ms apart trip the idle clock", "token_delay:ms=800", Fallback, (2, 1))
            .kind(IDLE).min_elapsed(2 * IDLE_MS),
        // At least 12 tokens: 11 gaps of 20 ms.
        openai("tokens 20 ms apart are fine", "token_delay:ms=20", Answered, (1, 0)).min_elapsed(220),
        openai("stream cut mid-answer is retried invisibly", "cut:after=3,ok", Answered, (2, 0)).kind(K::StreamInterrupted),
        openai("stream cut every time: the fallback", "cut:after=3", Fallback, (2, 1)).kind(K::StreamInterrupted),
        openai("paced stream cut, then ok", "cut:after=3+token_delay:ms=5,ok", Answered, (2, 0)).kind(K::StreamInterrupted),
        openai("stall trips the idle clock, then ok", "stall:after=3,ok", Answered, (2, 0)).kind(IDLE),
        openai("malformed chunk fails the attempt cleanly", "malformed:after=2,ok", Answered, (2, 0)).kind(K::MalformedResponse),
        openai("mid-stream error event is retried", "stream_error:after=2,ok", Answered, (2, 0)).kind(K::StreamInterrupted),
        openai("missing [DONE]: finalised when the stream ends", "no_done", Answered, (1, 0)),
        openai("missing [DONE], patient clocks: finalised at once, not at a clock", "no_done", Answered, (1, 0))
            .patient().max_elapsed(1500),
        openai("max_tokens: the cut answer is reported as cut", "max_tokens", Answered, (1, 0)).text(Text::MaxTokens),
        openai("refusal is reported", "refusal", Answered, (1, 0)).text(Text::Refusal),
        openai("code fence around JSON the caller asked for: stripped in code", "code_fence", Answered, (1, 0)).text(Text::Repaired).prompt(Prompt::Json),
        openai("say: the answer is exactly the scripted text", say_spec(SAID), Answered, (1, 0)).text(Text::Exactly(SAID)),
        openai("every tier down: the degraded reply", "503", Degraded, (2, 2)).kind(K::Overloaded).fallback(OPENAI, "sim:500"),
        openai("every tier rejects the key: degraded, two alerts", "401", Degraded, (1, 1))
            .kind(K::Unauthorized).alerts(2).fallback(OPENAI, "sim:403"),
        openai("OpenAI down: the Anthropic tier answers", "503", Fallback, (2, 1))
            .kind(K::Overloaded).fallback(ANTHROPIC, "sim-fallback-anthropic"),
        openai("OpenAI out of quota: the Anthropic tier answers", "insufficient_quota", Fallback, (1, 1))
            .kind(K::QuotaExhausted).alerts(1).fallback(ANTHROPIC, "sim-fallback-anthropic"),
    ]
}

/// The main faults through the Gemini adapter, streaming: Google's statuses, `RetryInfo` as
/// the wait (the fault spec travels in the model, so in the URL's path), a stream cut before its
/// `finishReason`, and a fallback to another format.
#[rustfmt::skip]
fn gemini_rows() -> Vec<Row> {
    vec![
        gemini("healthy", "ok", Answered, (1, 0)),
        gemini("503 UNAVAILABLE then ok", "503,ok", Answered, (2, 0)).kind(K::Overloaded),
        gemini("persistent 503: two attempts, then the fallback", "503", Fallback, (2, 1)).kind(K::Overloaded),
        gemini("500 INTERNAL then ok", "500,ok", Answered, (2, 0)).kind(K::ServerError),
        gemini("429 with RetryInfo 1 s: the retry waits Google's second", "429:retry_after=1,ok", Answered, (2, 0))
            .kind(K::RateLimited).pushback(1000),
        gemini("429 with RetryInfo beyond the deadline: the fallback at once", "429:retry_after=9", Fallback, (1, 1))
            .kind(K::RateLimited),
        gemini("API_KEY_INVALID: never retried, alert", "401", Fallback, (1, 1)).kind(K::Unauthorized).alerts(1),
        gemini("NOT_FOUND: never retried, alert", "404", Fallback, (1, 1)).kind(K::NotFound).alerts(1),
        gemini("input token count: the larger-context tier answers", "context_length", Fallback, (1, 1))
            .kind(K::ContextLength).windows(1_048_576, 2_000_000),
        gemini("stream cut before its finishReason is retried", "cut:after=3,ok", Answered, (2, 0)).kind(K::StreamInterrupted),
        gemini("stream cut every time: the fallback", "cut:after=3", Fallback, (2, 1)).kind(K::StreamInterrupted),
        gemini("malformed chunk fails the attempt cleanly", "malformed:after=2,ok", Answered, (2, 0)).kind(K::MalformedResponse),
        gemini("mid-stream UNAVAILABLE record is retried", "stream_error:after=2,ok", Answered, (2, 0)).kind(K::Overloaded),
        gemini("slow first token (1.5 s) is cut at 1 s", "slow_first_token:ms=1500", Fallback, (2, 1))
            .kind(FIRST_TOKEN).min_elapsed(2 * FIRST_TOKEN_MS),
        gemini("max_tokens: the cut answer is reported as cut", "max_tokens", Answered, (1, 0)).text(Text::MaxTokens),
        gemini("Gemini down: the OpenAI tier answers", "503", Fallback, (2, 1))
            .kind(K::Overloaded).fallback(OPENAI, "sim-fallback-openai"),
    ]
}

/// The main faults through the Anthropic adapter, streaming.
#[rustfmt::skip]
fn anthropic_rows() -> Vec<Row> {
    vec![
        anthropic("healthy", "ok", Answered, (1, 0)),
        anthropic("529 then ok: the primary answers on its second attempt", "529,ok", Answered, (2, 0)).kind(K::Overloaded),
        anthropic("persistent 529: two attempts, then the fallback", "529", Fallback, (2, 1)).kind(K::Overloaded),
        anthropic("503 then ok", "503,ok", Answered, (2, 0)).kind(K::ServerError),
        anthropic("500 then ok", "500,ok", Answered, (2, 0)).kind(K::ServerError),
        anthropic("408 then ok", "408,ok", Answered, (2, 0)).kind(K::RequestTimeout),
        anthropic("409 then ok", "409,ok", Answered, (2, 0)).kind(K::Conflict),
        anthropic("429 retry-after 1 s then ok", "429:retry_after=1,ok", Answered, (2, 0)).kind(K::RateLimited).pushback(1000),
        anthropic("429 without retry-after: persistent, then the fallback", "429", Fallback, (2, 1)).kind(K::RateLimited),
        anthropic("credit balance too low (400): never retried, alert", "insufficient_quota", Fallback, (1, 1))
            .kind(K::QuotaExhausted).alerts(1),
        anthropic("workspace usage limit (429): never retried, alert", "spend_cap", Fallback, (1, 1))
            .kind(K::QuotaExhausted).alerts(1),
        anthropic("usage limit sent as 400: never retried, alert", "spend_cap:status=400", Fallback, (1, 1))
            .kind(K::QuotaExhausted).alerts(1),
        anthropic("401", "401", Fallback, (1, 1)).kind(K::Unauthorized).alerts(1),
        anthropic("403", "403", Fallback, (1, 1)).kind(K::Forbidden).alerts(1),
        anthropic("404", "404", Fallback, (1, 1)).kind(K::NotFound).alerts(1),
        anthropic("413", "413", Fallback, (1, 1)).kind(K::PayloadTooLarge).alerts(1),
        anthropic("context length: the larger-context tier answers", "context_length", Fallback, (1, 1))
            .kind(K::ContextLength).windows(200_000, 1_000_000),
        anthropic("context length, no larger tier: the caller is told", "context_length", ContextLength, (1, 0))
            .kind(K::ContextLength).windows(200_000, 200_000),
        anthropic("content policy: stop with the provider's reason", "content_policy:reason=violence", ContentPolicy("violence"), (1, 0))
            .kind(K::ContentPolicy),
        anthropic("prefill rejected: the next tier takes the request", "reject_prefill", Fallback, (1, 1))
            .kind(K::InvalidRequest).alerts(1).prompt(Prompt::Prefill),
        anthropic("reset before headers then ok", "reset,ok", Answered, (2, 0)).kind(K::ConnectionFailed),
        anthropic("hang: the first-token clock, twice, then the fallback", "hang", Fallback, (2, 1))
            .kind(FIRST_TOKEN).min_elapsed(2 * FIRST_TOKEN_MS),
        anthropic("slow first token (1.5 s) is cut at 1 s", "slow_first_token:ms=1500", Fallback, (2, 1))
            .kind(FIRST_TOKEN).min_elapsed(2 * FIRST_TOKEN_MS),
        anthropic("tokens 800 ms apart trip the idle clock", "token_delay:ms=800", Fallback, (2, 1))
            .kind(IDLE).min_elapsed(2 * IDLE_MS),
        anthropic("stream cut mid-answer is retried invisibly", "cut:after=3,ok", Answered, (2, 0)).kind(K::StreamInterrupted),
        anthropic("stream cut every time: the fallback", "cut:after=3", Fallback, (2, 1)).kind(K::StreamInterrupted),
        anthropic("stall trips the idle clock, then ok", "stall:after=3,ok", Answered, (2, 0)).kind(IDLE),
        anthropic("malformed chunk fails the attempt cleanly", "malformed:after=2,ok", Answered, (2, 0)).kind(K::MalformedResponse),
        anthropic("mid-stream overloaded_error is retried", "stream_error:after=2,ok", Answered, (2, 0)).kind(K::Overloaded),
        anthropic("missing message_stop: finalised when the stream ends", "no_done", Answered, (1, 0)),
        anthropic("missing message_stop, patient clocks: finalised at once", "no_done", Answered, (1, 0))
            .patient().max_elapsed(1500),
        anthropic("max_tokens: the cut answer is reported as cut", "max_tokens", Answered, (1, 0)).text(Text::MaxTokens),
        anthropic("refusal is reported", "refusal", Answered, (1, 0)).text(Text::Refusal),
        anthropic("Anthropic down: the OpenAI tier answers", "529", Fallback, (2, 1))
            .kind(K::Overloaded).fallback(OPENAI, "sim-fallback-openai"),
        anthropic("every tier down: the degraded reply", "529", Degraded, (2, 2)).kind(K::Overloaded).fallback(OPENAI, "sim:503"),
    ]
}

fn bedrock(
    name: &'static str,
    spec: impl Into<String>,
    expect: Expect,
    attempts: (usize, usize),
) -> Row {
    row(name, BEDROCK, spec, expect, attempts)
}

/// The simulator's faults through the Bedrock Converse adapter (SigV4, event-stream frames),
/// each arriving as Bedrock sends it: typed errors, exception frames, frames with a bad CRC.
#[rustfmt::skip]
fn bedrock_rows() -> Vec<Row> {
    vec![
        bedrock("healthy", "ok", Answered, (1, 0)),
        bedrock("ServiceUnavailableException then ok", "529,ok", Answered, (2, 0)).kind(K::Overloaded),
        bedrock("persistent ServiceUnavailableException: the fallback", "529", Fallback, (2, 1)).kind(K::Overloaded),
        bedrock("InternalServerException then ok", "500,ok", Answered, (2, 0)).kind(K::ServerError),
        bedrock("ModelNotReadyException then ok", "409,ok", Answered, (2, 0)).kind(K::Overloaded),
        bedrock("ThrottlingException retry-after 1 s then ok", "429:retry_after=1,ok", Answered, (2, 0)).kind(K::RateLimited).pushback(1000),
        bedrock("ServiceQuotaExceededException: never retried, alert", "insufficient_quota", Fallback, (1, 1))
            .kind(K::QuotaExhausted).alerts(1),
        bedrock("ExpiredTokenException (403): never retried, alert", "401", Fallback, (1, 1)).kind(K::Unauthorized).alerts(1),
        bedrock("AccessDeniedException", "403", Fallback, (1, 1)).kind(K::Forbidden).alerts(1),
        bedrock("ResourceNotFoundException", "404", Fallback, (1, 1)).kind(K::NotFound).alerts(1),
        bedrock("ValidationException, input too long: the larger tier answers", "context_length", Fallback, (1, 1))
            .kind(K::ContextLength).windows(200_000, 1_000_000),
        bedrock("reset before headers then ok", "reset,ok", Answered, (2, 0)).kind(K::ConnectionFailed),
        bedrock("hang: the first-token clock, twice, then the fallback", "hang", Fallback, (2, 1))
            .kind(FIRST_TOKEN).min_elapsed(2 * FIRST_TOKEN_MS),
        bedrock("stream cut mid-answer is retried invisibly", "cut:after=3,ok", Answered, (2, 0)).kind(K::StreamInterrupted),
        bedrock("stream cut every time: the fallback", "cut:after=3", Fallback, (2, 1)).kind(K::StreamInterrupted),
        bedrock("a frame with a bad CRC fails the attempt cleanly", "malformed:after=2,ok", Answered, (2, 0)).kind(K::MalformedResponse),
        bedrock("throttlingException frame mid-stream is retried", "stream_error:after=2,ok", Answered, (2, 0)).kind(K::RateLimited),
        bedrock("max_tokens: the cut answer is reported as cut", "max_tokens", Answered, (1, 0)).text(Text::MaxTokens),
        bedrock("Bedrock down: the Anthropic tier answers", "529", Fallback, (2, 1))
            .kind(K::Overloaded).fallback(ANTHROPIC, "sim-fallback-anthropic"),
        bedrock("whole answer", "ok", Answered, (1, 0)).mode(Mode::Whole),
        bedrock("whole answer after a ThrottlingException", "429,ok", Answered, (2, 0)).kind(K::RateLimited).mode(Mode::Whole),
        anthropic("Anthropic 529s: the same model on Bedrock answers", "529", Fallback, (2, 1))
            .kind(K::Overloaded).fallback(BEDROCK, "sim-fallback-bedrock"),
        anthropic("Anthropic 529s, whole answers: Bedrock answers", "529", Fallback, (2, 1))
            .kind(K::Overloaded).fallback(BEDROCK, "sim-fallback-bedrock").mode(Mode::Whole),
    ]
}

/// The adapters asking for whole answers: the same faults arrive as a body cut, stalled or
/// garbled half-way, or as the equivalent error status.
#[rustfmt::skip]
fn whole_rows() -> Vec<Row> {
    let whole = |row: Row| row.mode(Mode::Whole);
    vec![
        whole(openai("healthy", "ok", Answered, (1, 0))),
        whole(anthropic("healthy", "ok", Answered, (1, 0))),
        whole(openai("529 then ok", "529,ok", Answered, (2, 0))).kind(K::Overloaded),
        whole(anthropic("529 then ok", "529,ok", Answered, (2, 0))).kind(K::Overloaded),
        whole(openai("body cut half-way, then ok", "cut:after=3,ok", Answered, (2, 0))).kind(K::StreamInterrupted),
        whole(anthropic("body cut half-way, then ok", "cut:after=3,ok", Answered, (2, 0))).kind(K::StreamInterrupted),
        whole(openai("half a body: malformed, then ok", "malformed:after=2,ok", Answered, (2, 0))).kind(K::MalformedResponse),
        whole(anthropic("half a body: malformed, then ok", "malformed:after=2,ok", Answered, (2, 0))).kind(K::MalformedResponse),
        whole(openai("body stalls half-way: the first-token clock", "stall:after=3,ok", Answered, (2, 0))).kind(FIRST_TOKEN),
        whole(openai("stream_error becomes a 500", "stream_error:after=2,ok", Answered, (2, 0))).kind(K::ServerError),
        whole(anthropic("stream_error becomes a 529", "stream_error:after=2,ok", Answered, (2, 0))).kind(K::Overloaded),
        whole(openai("slow answer (1.5 s) is cut at the first-token clock", "slow_first_token:ms=1500", Fallback, (2, 1)))
            .kind(FIRST_TOKEN),
        whole(openai("no_done is healthy without a stream", "no_done", Answered, (1, 0))),
        whole(openai("max_tokens", "max_tokens", Answered, (1, 0))).text(Text::MaxTokens),
        whole(anthropic("max_tokens", "max_tokens", Answered, (1, 0))).text(Text::MaxTokens),
        whole(openai("refusal", "refusal", Answered, (1, 0))).text(Text::Refusal),
        whole(anthropic("refusal", "refusal", Answered, (1, 0))).text(Text::Refusal),
        whole(openai("OpenAI down: the Anthropic tier answers", "500", Fallback, (2, 1)))
            .kind(K::ServerError).fallback(ANTHROPIC, "sim-fallback-anthropic"),
    ]
}

/// `Engine::stream` in both release modes. A passthrough row whose script would answer on a
/// retry (`cut:after=3,ok`) proves no retry happens once tokens reached the caller.
#[rustfmt::skip]
fn release_rows() -> Vec<Row> {
    let checked = |row: Row| row.mode(Mode::Checked);
    let passthrough = |row: Row| row.mode(Mode::Passthrough);
    vec![
        checked(openai("healthy", "ok", Answered, (1, 0))),
        checked(openai("cut after 3 tokens is retried invisibly", "cut:after=3,ok", Answered, (2, 0))).kind(K::StreamInterrupted),
        checked(openai("cut every time: the fallback's whole answer", "cut:after=3", Fallback, (2, 1))).kind(K::StreamInterrupted),
        checked(anthropic("cut after 3 tokens is retried invisibly", "cut:after=3,ok", Answered, (2, 0))).kind(K::StreamInterrupted),
        checked(anthropic("mid-stream error is retried invisibly", "stream_error:after=2,ok", Answered, (2, 0))).kind(K::Overloaded),
        checked(openai("stall after 3 tokens is retried invisibly", "stall:after=3,ok", Answered, (2, 0))).kind(IDLE),
        passthrough(openai("healthy", "ok", Answered, (1, 0))),
        passthrough(anthropic("healthy", "ok", Answered, (1, 0))),
        passthrough(openai("cut after 3 tokens: an in-band error, exactly 3 tokens", "cut:after=3,ok", Interrupted(3), (1, 0)))
            .kind(K::StreamInterrupted),
        passthrough(anthropic("cut after 3 tokens: an in-band error, exactly 3 tokens", "cut:after=3,ok", Interrupted(3), (1, 0)))
            .kind(K::StreamInterrupted),
        passthrough(openai("mid-stream error after 2 tokens: an in-band error", "stream_error:after=2,ok", Interrupted(2), (1, 0)))
            .kind(K::StreamInterrupted),
        passthrough(anthropic("mid-stream error after 2 tokens: an in-band error", "stream_error:after=2,ok", Interrupted(2), (1, 0)))
            .kind(K::Overloaded),
        passthrough(openai("stall after 3 tokens: an in-band error at the idle clock", "stall:after=3,ok", Interrupted(3), (1, 0)))
            .kind(IDLE),
        passthrough(openai("cut before the first token is still retried", "cut:after=0,ok", Answered, (2, 0))).kind(K::StreamInterrupted),
        passthrough(openai("529 before any token: the fallback streams", "529", Fallback, (2, 1))).kind(K::Overloaded),
        passthrough(openai("OpenAI down before any token: the Anthropic tier streams", "503", Fallback, (2, 1)))
            .kind(K::Overloaded).fallback(ANTHROPIC, "sim-fallback-anthropic"),
    ]
}

/// The validation ladder on answers that arrived whole: a cut-off asked again with a doubled
/// ceiling, a refusal turned into the safe reply, a fence stripped in code, JSON that does not
/// parse asked again with its problems (a `say:` script the simulator continues across the
/// re-ask).
#[rustfmt::skip]
fn ladder_rows() -> Vec<Row> {
    let not_json_then_json = || format!("{},{}", say_spec(SAID), say_spec(SAID_JSON));
    vec![
        openai("cut-off: asked again with a doubled ceiling, then whole", "max_tokens,ok", Answered, (2, 0))
            .contract(OutputContract::text()).prompt(Prompt::Ceiling).reasks(1),
        anthropic("cut-off: asked again with a doubled ceiling, then whole", "max_tokens,ok", Answered, (2, 0))
            .contract(OutputContract::text()).prompt(Prompt::Ceiling).reasks(1),
        openai("cut-off twice: the fallback's whole answer", "max_tokens", Fallback, (2, 1))
            .contract(OutputContract::text()).prompt(Prompt::Ceiling).reasks(1),
        openai("refusal: the safe reply", "refusal", Declined, (1, 0)).contract(OutputContract::text()),
        anthropic("refusal: the safe reply", "refusal", Declined, (1, 0)).contract(OutputContract::text()),
        openai("code fence stripped in code", "code_fence", Answered, (1, 0))
            .contract(OutputContract::json(None)).prompt(Prompt::Json).text(Text::Repaired),
        openai("not JSON: asked again with its problems, then JSON", not_json_then_json(), Answered, (2, 0))
            .contract(OutputContract::json(None)).prompt(Prompt::Json).reasks(1).text(Text::Exactly(SAID_JSON)),
        anthropic("not JSON: asked again with its problems, then JSON", not_json_then_json(), Answered, (2, 0))
            .contract(OutputContract::json(None)).prompt(Prompt::Json).reasks(1).text(Text::Exactly(SAID_JSON)),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_faults_through_the_real_adapter() {
    let rows = openai_rows();
    assert!(rows.len() >= 45);
    run(rows).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_faults_through_the_real_adapter() {
    let rows = anthropic_rows();
    assert!(rows.len() >= 30);
    run(rows).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bedrock_faults_through_the_real_adapter() {
    run(bedrock_rows()).await;
}

/// The same faults through the Bedrock adapter on InvokeModel for Claude (`api = invoke`):
/// Anthropic's body and events inside Bedrock's paths, frames and error types.
#[tokio::test(flavor = "multi_thread")]
async fn bedrock_invoke_faults_through_the_real_adapter() {
    run(bedrock_rows().into_iter().map(Row::invoke).collect()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gemini_faults_through_the_real_adapter() {
    run(gemini_rows()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn whole_answers_through_the_real_adapters() {
    run(whole_rows()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn release_modes_through_the_real_adapters() {
    run(release_rows()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn validation_ladder_through_the_real_adapters() {
    run(ladder_rows()).await;
}

#[test]
fn every_simulator_fault_has_an_openai_row() {
    let rows: Vec<Row> = [openai_rows(), whole_rows(), release_rows(), ladder_rows()]
        .into_iter()
        .flatten()
        .collect();
    for fault in rein_sim::FAULT_NAMES {
        let covered = rows
            .iter()
            .filter(|r| r.format == OPENAI)
            .any(|r| r.spec.split([',', '+']).any(|step| step.split(':').next() == Some(*fault)));
        assert!(covered, "no OpenAI row exercises the simulator's `{fault}`");
    }
}

/// Runs the rows concurrently, a few at a time, and reports every row that failed.
async fn run(rows: Vec<Row>) {
    let mut names: Vec<String> = rows.iter().map(label).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), rows.len(), "row names must be unique");

    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_ROWS));
    let mut set = tokio::task::JoinSet::new();
    for row in rows {
        let limit = limit.clone();
        set.spawn(async move {
            let _permit = limit.acquire_owned().await.expect("semaphore");
            check(row).await;
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = set.join_next().await {
        if let Err(error) = joined {
            let message = match error.try_into_panic() {
                Ok(payload) => payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic without a message".to_owned()),
                Err(error) => error.to_string(),
            };
            failures.push(message);
        }
    }
    assert!(failures.is_empty(), "{} rows failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

fn label(row: &Row) -> String {
    let api = if row.invoke { " invoke" } else { "" };
    format!("[{}{api} {:?}] {}", row.format, row.mode, row.name)
}

fn provider(
    format: WireFormat,
    invoke: bool,
    base_url: &str,
    streaming: bool,
    client: &HttpClient,
) -> Arc<dyn Provider> {
    let config = match format {
        WireFormat::OpenAi => {
            let mut config = OpenAiConfig::new("sim-openai", base_url);
            config.streaming = streaming;
            ProviderConfig::OpenAi(config)
        }
        WireFormat::Anthropic => {
            let mut config = AnthropicConfig::new("sim-anthropic", base_url);
            config.streaming = streaming;
            ProviderConfig::Anthropic(config)
        }
        WireFormat::Gemini => {
            let mut config = GeminiConfig::new("sim-gemini", base_url);
            config.streaming = streaming;
            ProviderConfig::Gemini(config)
        }
        WireFormat::Bedrock => {
            let mut config = BedrockConfig::new("sim-bedrock", "us-east-1");
            config.base_url = Some(base_url.trim_end_matches("/v1").to_owned());
            config.access_key_id = Some(Secret::new("AKIDEXAMPLE"));
            config.secret_access_key =
                Some(Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"));
            config.streaming = streaming;
            if invoke {
                config.api = BedrockApi::Invoke;
            }
            ProviderConfig::Bedrock(config)
        }
    };
    build_provider(config, client).expect("provider")
}

/// Whether `path` is the chat endpoint of `format` (Bedrock's and Gemini's name the model).
fn is_endpoint(format: WireFormat, invoke: bool, path: &str, streaming: bool) -> bool {
    match format {
        WireFormat::OpenAi => path == "/v1/chat/completions",
        WireFormat::Anthropic => path == "/v1/messages",
        // The model and the method follow: `/v1/models/{model}:generateContent`.
        WireFormat::Gemini => path.starts_with("/v1/models/"),
        WireFormat::Bedrock => {
            let action = match (invoke, streaming) {
                (false, true) => "/converse-stream",
                (false, false) => "/converse",
                (true, true) => "/invoke-with-response-stream",
                (true, false) => "/invoke",
            };
            path.starts_with("/model/") && path.ends_with(action)
        }
    }
}

/// The request, and the same conversation as an OpenAI body for `rein_sim::healthy_text`.
fn request(prompt: Prompt) -> (ChatRequest, Value) {
    let mut request =
        ChatRequest { messages: vec![Message::user(PROMPT)], ..ChatRequest::default() };
    let mut body = json!({"model": "any", "messages": [{"role": "user", "content": PROMPT}]});
    match prompt {
        Prompt::Plain => {}
        Prompt::Prefill => {
            request.messages.push(Message::assistant(PREFILL));
            body["messages"] = json!([
                {"role": "user", "content": PROMPT},
                {"role": "assistant", "content": PREFILL}
            ]);
        }
        Prompt::Json => {
            request.response_format = Some(ResponseFormat::JsonObject);
            body["response_format"] = json!({"type": "json_object"});
        }
        Prompt::Ceiling => {
            request.max_tokens = Some(64);
            body["max_tokens"] = json!(64);
        }
    }
    (request, body)
}

/// Everything a released stream gave the caller: its text, then how it ended.
async fn drain(mut stream: ReleaseStream) -> (Result<Completion, CallError>, String) {
    let mut text = String::new();
    while let Some(item) = stream.next().await {
        let end = match item {
            Released::Event(StreamEvent::TextDelta { text: delta }) => {
                text.push_str(&delta);
                continue;
            }
            Released::Event(_) => continue,
            Released::Completed(done) => Ok(*done),
            Released::Failed(error) => Err(*error),
        };
        assert!(stream.next().await.is_none(), "nothing follows the end of a released stream");
        return (end, text);
    }
    panic!("the released stream ended without Completed or Failed");
}

async fn check(row: Row) {
    let label = label(&row);
    let sim = rein_sim::bind(([127, 0, 0, 1], 0).into(), SimConfig::default()).await.expect("sim");
    let base_url = format!("{}/v1", sim.base_url());
    let client = HttpClient::new(&HttpClientConfig {
        connect_timeout_ms: 1000,
        ..HttpClientConfig::default()
    })
    .expect("client");
    let streaming = row.mode != Mode::Whole;
    let primary_model = format!("sim:{}", row.spec);
    let mut primary = Tier::new(
        "primary",
        provider(row.format, row.invoke, &base_url, streaming, &client),
        &primary_model,
    );
    let mut fallback = Tier::new(
        "fallback",
        provider(row.fallback_format, row.invoke, &base_url, streaming, &client),
        row.fallback_model,
    );
    if let Some((p, f)) = row.windows {
        primary = primary.with_context_window(p);
        fallback = fallback.with_context_window(f);
    }
    let fallback_provider = fallback.provider.name().to_string();
    let mut route = Route::new("r", vec![primary, fallback]);
    let clocks = clocks(row.patient);
    route.clocks = clocks;
    route.retry = retry_policy();
    route.contract = row.contract.clone();
    // The table's route has a degraded reply (a route without one fails instead: `degraded`
    // in rein-core's tests).
    route.degraded = Some(DegradedReply::default());
    route.release = match row.mode {
        Mode::Passthrough => ReleaseMode::Passthrough,
        _ => ReleaseMode::Checked,
    };
    let engine = Engine::builder().route(route).jitter(Arc::new(FixedJitter(0.5))).build();

    let (request, body) = request(row.prompt);
    let healthy_answer = rein_sim::healthy_answer(&body);
    let healthy = healthy_answer.text.clone();
    if row.prompt != Prompt::Json {
        assert!(healthy.ends_with(SENTINEL), "{label}: the healthy answer ends with the sentinel");
    }
    let started = Instant::now();
    let (result, streamed) = match row.mode {
        Mode::Complete | Mode::Whole => {
            (engine.complete(CallContext::new(), "r", request).await, None)
        }
        Mode::Checked | Mode::Passthrough => {
            let stream = engine.stream(CallContext::new(), "r", request).expect("route");
            let (end, text) = drain(stream).await;
            (end, Some(text))
        }
    };
    let elapsed = started.elapsed();
    let log = sim.log();
    sim.shutdown().await;
    // Every message names the row and what the engine did, step by step.
    let report = match &result {
        Ok(done) => Some(&done.report),
        Err(error) => error.report(),
    };
    let label = format!("{label}\n  steps: {}\n ", report.map(trail).unwrap_or_default());
    let name = label.as_str();

    // The outcome, and the answer the caller got.
    let report = match (&result, row.expect) {
        (Ok(done), Answered) => {
            assert_eq!(done.outcome(), Outcome::Answered, "{name}");
            let served = done.report.served_by.as_ref().expect("served_by");
            assert_eq!((served.tier, served.model.as_str()), (0, primary_model.as_str()), "{name}");
            &done.report
        }
        (Ok(done), Fallback) => {
            assert_eq!(done.outcome(), Outcome::Fallback, "{name}");
            let served = done.report.served_by.as_ref().expect("served_by");
            assert_eq!(served.tier, 1, "{name}: served by the fallback");
            assert_eq!(served.model, row.fallback_model, "{name}: the model that answered");
            assert_eq!(served.provider, fallback_provider, "{name}: the provider that answered");
            &done.report
        }
        (Ok(done), Degraded) => {
            assert_eq!(done.outcome(), Outcome::Degraded, "{name}");
            assert_eq!(done.response.model, "rein-degraded", "{name}");
            assert_eq!(done.report.served_by, None, "{name}");
            &done.report
        }
        (Err(CallError::ContentPolicy { reason, report }), ContentPolicy(words)) => {
            assert!(
                reason.contains(words),
                "{name}: the provider's reason reaches the caller: {reason}"
            );
            assert_eq!(report.outcome, Outcome::Stopped, "{name}");
            report
        }
        (Err(CallError::ContextLength { reason, report }), ContextLength) => {
            let said = reason.to_ascii_lowercase();
            assert!(
                said.contains("context length") || said.contains("prompt is too long"),
                "{name}: the provider's words reach the caller: {reason}"
            );
            assert_eq!(report.outcome, Outcome::Stopped, "{name}");
            report
        }
        (Err(CallError::Interrupted { report, .. }), Interrupted(tokens)) => {
            let sent: String = healthy.split_inclusive(' ').take(tokens).collect();
            assert_eq!(
                streamed.as_deref(),
                Some(sent.as_str()),
                "{name}: exactly the tokens sent before the failure reached the caller"
            );
            assert_eq!(report.outcome, Outcome::Interrupted, "{name}");
            report
        }
        (Ok(done), Declined) => {
            assert_eq!(done.outcome(), Outcome::Declined, "{name}");
            assert_eq!(done.response.model, "rein-degraded", "{name}: the safe reply");
            assert_eq!(done.report.served_by, None, "{name}");
            &done.report
        }
        (other, expect) => panic!("{name}: expected {expect:?}, got {other:#?}"),
    };
    if let Ok(done) = &result
        && matches!(row.expect, Answered | Fallback)
    {
        check_text(name, row.text, &done.response, &healthy);
        if row.text == Text::Whole {
            assert_eq!(
                done.response.usage, healthy_answer.usage,
                "{name}: the usage of the answer served, nothing of failed attempts"
            );
        }
        if let Some(streamed) = &streamed {
            assert_eq!(
                streamed, &done.response.text,
                "{name}: the caller received the answer exactly once, nothing of failed attempts"
            );
        }
    }

    // Attempts: the report and the simulator's own log agree with the row.
    let seen = |model: &str| -> Vec<&LogEntry> {
        log.iter().filter(|e| e.model.as_deref() == Some(model)).collect()
    };
    let primary_log = seen(&primary_model);
    let fallback_log = seen(row.fallback_model);
    assert_eq!(
        primary_log.len() + fallback_log.len(),
        log.len(),
        "{name}: only the two tiers' requests reached the simulator: {log:#?}"
    );
    assert_eq!(
        (primary_log.len(), fallback_log.len()),
        row.attempts,
        "{name}: attempts the simulator saw"
    );
    assert_eq!(
        (report.attempts_on(0), report.attempts_on(1)),
        row.attempts,
        "{name}: attempts in the report"
    );
    for (entries, format) in [(&primary_log, row.format), (&fallback_log, row.fallback_format)] {
        for entry in entries {
            assert!(
                is_endpoint(format, row.invoke, &entry.path, streaming),
                "{name}: {}",
                entry.path
            );
            assert_eq!(entry.format.as_deref(), Some(format.to_string().as_str()), "{name}");
            assert_eq!(entry.stream, streaming, "{name}: streaming as configured");
        }
    }
    if row.spec.contains(',') {
        let steps = row.spec.split(',').count();
        let walked: Vec<Option<u32>> = primary_log.iter().map(|e| e.script_step).collect();
        let expected: Vec<Option<u32>> =
            (1..=primary_log.len()).map(|n| Some(n.min(steps) as u32)).collect();
        assert_eq!(walked, expected, "{name}: the retries walked the script");
    }
    for attempt in report.attempts() {
        let model = if attempt.tier == 0 { primary_model.as_str() } else { row.fallback_model };
        assert_eq!(attempt.model, model, "{name}");
    }
    let first = report.attempts().next().expect("at least one attempt");
    assert_eq!(first.tier, 0, "{name}: the primary is tried first");
    assert_eq!(
        first.classified.as_ref().map(|c| c.kind),
        row.kind,
        "{name}: kind of the primary's first failure ({:?})",
        first.failure
    );
    // A clock fires at its time, never before (and the attempt took at least that long).
    if let Some(Failure::ClockFired { clock, after }) = &first.failure {
        let least = match clock {
            Clock::FirstToken => clocks.first_token,
            Clock::StreamIdle => clocks.stream_idle,
            Clock::Attempt | Clock::Connect => Duration::ZERO,
        };
        assert!(*after >= least, "{name}: the {clock:?} clock fired after only {after:?}");
        assert!(first.elapsed_ms >= least.as_millis() as u64, "{name}: {first:?}");
    }
    assert_eq!(report.alerts.len(), row.alerts, "{name}: alerts {:#?}", report.alerts);

    // Waits: the report says how long each retry waited; the simulator's log proves it. An
    // answer the ladder asks for again follows at once, without a wait.
    let mut pending: [Option<(u64, bool)>; 2] = [None, None];
    let mut preceded: [Vec<Option<(u64, bool)>>; 2] = [Vec::new(), Vec::new()];
    let mut reasks = [0usize; 2];
    for step in &report.steps {
        match step {
            Step::Wait { tier, wait_ms, pushback, .. } => {
                pending[*tier] = Some((*wait_ms, *pushback))
            }
            Step::Attempt(attempt) => preceded[attempt.tier].push(pending[attempt.tier].take()),
            Step::Reask { tier, .. } => reasks[*tier] += 1,
            _ => {}
        }
    }
    assert_eq!(reasks.iter().sum::<usize>(), row.reasks, "{name}: answers asked for again");
    for (tier, entries) in [(0, &primary_log), (1, &fallback_log)] {
        let waits: Vec<(u64, bool)> = preceded[tier].iter().flatten().copied().collect();
        assert_eq!(
            waits.len() + reasks[tier],
            entries.len().saturating_sub(1),
            "{name}: tier {tier}: one wait per retry, none before a re-ask"
        );
        for (pair, wait) in entries.windows(2).zip(preceded[tier].iter().skip(1)) {
            let Some((wait_ms, pushback)) = *wait else { continue };
            match (tier, row.pushback_ms) {
                (0, Some(server)) => {
                    assert_eq!((wait_ms, pushback), (server, true), "{name}: the server's wait")
                }
                _ => assert_eq!((wait_ms, pushback), (BACKOFF_MS, false), "{name}: our backoff"),
            }
            let gap = pair[1].elapsed_ms - pair[0].elapsed_ms;
            assert!(gap >= FLOOR_MS, "{name}: tier {tier}: two attempts {gap} ms apart");
            assert!(
                gap >= wait_ms,
                "{name}: tier {tier}: a retry arrived {gap} ms after the attempt before it, \
                 sooner than its {wait_ms} ms wait"
            );
        }
    }

    // The call stays inside its deadline, and takes the time its faults imply.
    assert!(
        elapsed < clocks.deadline + DEADLINE_SLACK,
        "{name}: took {elapsed:?}, past the {:?} deadline",
        clocks.deadline
    );
    assert!(elapsed >= ms(row.min_elapsed_ms), "{name}: took only {elapsed:?}");
    if let Some(most) = row.max_elapsed_ms {
        assert!(elapsed < ms(most), "{name}: took {elapsed:?}");
    }
}

/// The steps of a call in one line: `t0#1 0+5ms overloaded | wait t0 15ms | t0#2 ...`.
fn trail(report: &CallReport) -> String {
    let steps: Vec<String> = report
        .steps
        .iter()
        .map(|step| match step {
            Step::Attempt(a) => {
                let how = match (&a.classified, &a.failure) {
                    (_, Some(Failure::ClockFired { clock, after })) => {
                        format!("{} clock after {after:?}", clock.as_str())
                    }
                    (Some(classified), _) => classified.kind.as_str().to_owned(),
                    (None, _) => "ok".to_owned(),
                };
                format!("t{}#{} {}+{}ms {how}", a.tier, a.number, a.started_ms, a.elapsed_ms)
            }
            Step::Wait { tier, wait_ms, pushback, .. } => {
                format!("wait t{tier} {wait_ms}ms{}", if *pushback { " (pushback)" } else { "" })
            }
            Step::TierSkipped { tier, at_ms, reason, .. } => {
                format!("skip t{tier} at {at_ms}ms: {reason:?}")
            }
            Step::Checked { tier, verdict, .. } => format!("check t{tier} {verdict}"),
            Step::Reask { tier, reason: ReaskReason::CutOff { max_tokens }, .. } => {
                format!("reask t{tier} with ceiling {max_tokens}")
            }
            Step::Reask { tier, reason: ReaskReason::ChecksFailed { problems }, .. } => {
                format!("reask t{tier} naming {} problems", problems.len())
            }
            Step::Degraded { at_ms } => format!("safe reply at {at_ms}ms"),
            other => format!("{other:?}"),
        })
        .collect();
    format!("{} (outcome {}, {} ms)", steps.join(" | "), report.outcome.as_str(), report.elapsed_ms)
}

/// The answer's text is what the simulator sent, whole, or honestly marked as not whole.
fn check_text(name: &str, text: Text, response: &ChatResponse, healthy: &str) {
    let said = format!("{}{}", response.text, response.refusal.as_deref().unwrap_or(""));
    match text {
        Text::Whole | Text::Repaired => {
            assert_eq!(response.text, healthy, "{name}: the whole answer, never a truncated one");
            assert_eq!(response.stop_reason, Some(StopReason::EndTurn), "{name}");
        }
        Text::MaxTokens => {
            assert_eq!(response.stop_reason, Some(StopReason::MaxTokens), "{name}");
            assert!(!response.text.is_empty(), "{name}: the part that was written");
            assert!(
                healthy.starts_with(&response.text) && response.text.len() < healthy.len(),
                "{name}: a strict prefix of the answer: {:?}",
                response.text
            );
            assert!(!said.contains(SENTINEL), "{name}");
        }
        Text::Refusal => {
            assert_eq!(response.stop_reason, Some(StopReason::Refusal), "{name}");
            assert!(said.contains("sim refusal"), "{name}: the refusal's words: {said:?}");
            assert!(!said.contains(SENTINEL), "{name}");
        }
        Text::Exactly(text) => {
            assert_eq!(response.text, text, "{name}");
            assert_eq!(response.stop_reason, Some(StopReason::EndTurn), "{name}");
        }
    }
}
