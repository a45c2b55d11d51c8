//! Classification against real error bodies: every recorded error fixture, and a few bodies
//! quoted in public issues, read by `parse_http_error` as the adapter reads a live response and
//! classified by rein-core, must get the kind and the move a user would expect. Mid-stream error
//! events go through `replay` (the live decoder) to the same classifier. One table, one helper.

use rein_core::{Disposition, Failure, FailureKind, WireFormat, classify};
use rein_providers::{parse_http_error, replay};
use reqwest::header::HeaderMap;

use crate::fixture;

const OPENAI: WireFormat = WireFormat::OpenAi;
const ANTHROPIC: WireFormat = WireFormat::Anthropic;
/// Google's error bodies, as the Gemini and Vertex adapters read them.
const GOOGLE: WireFormat = WireFormat::Gemini;

/// Where a body comes from.
#[derive(Debug, Clone, Copy)]
enum Body {
    /// A file under `tests/fixtures/` (sources in its README).
    Fixture(&'static str),
    /// A body quoted verbatim in a public issue (the source is named beside the row).
    Quoted(&'static str),
}

#[derive(Debug)]
struct Case {
    format: WireFormat,
    status: u16,
    body: Body,
    kind: FailureKind,
    disposition: Disposition,
}

const fn case(
    format: WireFormat,
    status: u16,
    body: Body,
    kind: FailureKind,
    disposition: Disposition,
) -> Case {
    Case { format, status, body, kind, disposition }
}

use Body::{Fixture, Quoted};
use Disposition::{NextLargerContextTier, RetryTier, SkipTierAndAlert, Stop};
use FailureKind as K;

/// Anthropic's monthly spend limit, sent as a 400 (github.com/anthropics/claude-code issue
/// #38035): no retry will lift it before the date it names.
const ANTHROPIC_USAGE_LIMITS_400: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-04-01 at 00:00 UTC."},"request_id":"req_011CZLrUfBVkVHn5T6EqQaf7"}"#;

/// Input plus `max_tokens` over the window (github.com/docker/docker-agent issue #569): a tier
/// with a larger context window can take it.
const ANTHROPIC_CONTEXT_LIMIT_400: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again"},"request_id":"req_011CUB2XUHWkFnQzxcKBbjpF"}"#;

/// OpenAI's prompt safety check on reasoning models (github.com/alan-turing-institute/t0-1
/// issue #69): a content-policy rejection, whose reason the caller must see.
const OPENAI_INVALID_PROMPT_400: &str = r#"{"error":{"message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy. Please try again with a different prompt: https://platform.openai.com/docs/guides/reasoning#advice-on-prompting","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}"#;

/// Azure OpenAI's token rate limit (github.com/jasonacox/TinyLLM issue #17): a numeric `code`,
/// no `type`; it clears by waiting.
const AZURE_TOKEN_RATE_LIMIT_429: &str = r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2023-05-15 have exceeded token rate limit of your current AIServices S0 pricing tier. Please retry after 86400 seconds. Please contact Azure support service if you would like to further increase the default rate limit."}}"#;

#[rustfmt::skip]
const ERROR_BODIES: &[Case] = &[
    // OpenAI: the same 429 status, two meanings, told apart by the body.
    case(OPENAI, 429, Fixture("openai/errors/429_rate_limit_exceeded.json"), K::RateLimited, RetryTier),
    case(OPENAI, 429, Fixture("openai/errors/429_insufficient_quota.json"), K::QuotaExhausted, SkipTierAndAlert),
    case(OPENAI, 400, Fixture("openai/errors/400_context_length_exceeded.json"), K::ContextLength, NextLargerContextTier),
    case(OPENAI, 400, Fixture("openai/errors/400_content_filter.json"), K::ContentPolicy, Stop),
    case(OPENAI, 401, Fixture("openai/errors/401_invalid_api_key.json"), K::Unauthorized, SkipTierAndAlert),
    case(OPENAI, 500, Fixture("openai/errors/500_server_error.json"), K::ServerError, RetryTier),
    case(OPENAI, 503, Fixture("openai/errors/503_model_overloaded.json"), K::Overloaded, RetryTier),
    case(OPENAI, 503, Fixture("openai/errors/503_server_is_overloaded.json"), K::Overloaded, RetryTier),
    case(OPENAI, 400, Quoted(OPENAI_INVALID_PROMPT_400), K::ContentPolicy, Stop),
    case(OPENAI, 429, Quoted(AZURE_TOKEN_RATE_LIMIT_429), K::RateLimited, RetryTier),
    // Anthropic: 529 is overload; credits and spend limits arrive as 400 or 429.
    case(ANTHROPIC, 529, Fixture("anthropic/errors/529_overloaded_error.json"), K::Overloaded, RetryTier),
    case(ANTHROPIC, 429, Fixture("anthropic/errors/429_rate_limit_error.json"), K::RateLimited, RetryTier),
    case(ANTHROPIC, 429, Fixture("anthropic/errors/429_rate_limit_error_org_itpm.json"), K::RateLimited, RetryTier),
    case(ANTHROPIC, 429, Fixture("anthropic/errors/429_spend_limit_constructed.json"), K::QuotaExhausted, SkipTierAndAlert),
    case(ANTHROPIC, 400, Fixture("anthropic/errors/400_prompt_too_long.json"), K::ContextLength, NextLargerContextTier),
    case(ANTHROPIC, 400, Fixture("anthropic/errors/400_credit_balance_too_low.json"), K::QuotaExhausted, SkipTierAndAlert),
    case(ANTHROPIC, 401, Fixture("anthropic/errors/401_authentication_error.json"), K::Unauthorized, SkipTierAndAlert),
    case(ANTHROPIC, 403, Fixture("anthropic/errors/403_permission_error.json"), K::Forbidden, SkipTierAndAlert),
    case(ANTHROPIC, 404, Fixture("anthropic/errors/404_not_found_error.json"), K::NotFound, SkipTierAndAlert),
    case(ANTHROPIC, 413, Fixture("anthropic/errors/413_request_too_large.json"), K::PayloadTooLarge, SkipTierAndAlert),
    case(ANTHROPIC, 500, Fixture("anthropic/errors/500_api_error.json"), K::ServerError, RetryTier),
    case(ANTHROPIC, 400, Quoted(ANTHROPIC_USAGE_LIMITS_400), K::QuotaExhausted, SkipTierAndAlert),
    case(ANTHROPIC, 400, Quoted(ANTHROPIC_CONTEXT_LIMIT_400), K::ContextLength, NextLargerContextTier),
    // Vertex AI: Google's bodies for both publishers (the adapter reads them as Google's), and
    // Claude's own 529. A per-minute base-model quota clears by waiting; a publisher model the
    // project may not use does not.
    case(GOOGLE, 429, Fixture("vertex/errors/429_quota_per_base_model.json"), K::RateLimited, RetryTier),
    case(GOOGLE, 429, Fixture("vertex/errors/429_input_tokens_per_minute.json"), K::RateLimited, RetryTier),
    case(GOOGLE, 429, Fixture("vertex/errors/429_resource_exhausted_retry_info.json"), K::RateLimited, RetryTier),
    case(GOOGLE, 400, Fixture("vertex/errors/400_failed_precondition_publisher_model.json"), K::QuotaExhausted, SkipTierAndAlert),
    case(GOOGLE, 401, Fixture("vertex/errors/401_unauthenticated.json"), K::Unauthorized, SkipTierAndAlert),
    case(GOOGLE, 403, Fixture("vertex/errors/403_permission_denied.json"), K::Forbidden, SkipTierAndAlert),
    case(GOOGLE, 503, Fixture("vertex/errors/503_unavailable.json"), K::Overloaded, RetryTier),
    case(ANTHROPIC, 529, Fixture("vertex/errors/529_overloaded_error.json"), K::Overloaded, RetryTier),
];

/// Mid-stream error events: (format, recorded stream, kind, move).
const STREAM_ERRORS: &[(WireFormat, &str, FailureKind, Disposition)] = &[
    (OPENAI, "openai/streams/mid_stream_error.sse", K::StreamInterrupted, RetryTier),
    (ANTHROPIC, "anthropic/streams/mid_stream_error.sse", K::Overloaded, RetryTier),
];

fn bytes(body: Body) -> Vec<u8> {
    match body {
        Fixture(path) => fixture(path),
        Quoted(text) => text.as_bytes().to_vec(),
    }
}

/// Classifies `failure` and says what, if anything, differs from the expectation.
fn check(
    what: String,
    failure: &Failure,
    kind: FailureKind,
    disposition: Disposition,
) -> Option<String> {
    let classified = classify(failure);
    let got = (classified.kind, classified.disposition);
    (got != (kind, disposition)).then(|| {
        format!(
            "{what}: expected {kind:?} / {disposition:?}, got {:?} / {:?} ({})\n  {failure}",
            got.0, got.1, classified.reason
        )
    })
}

#[test]
fn real_error_bodies_classify_as_a_user_expects() {
    let mut wrong = Vec::new();
    for case in ERROR_BODIES {
        let http = parse_http_error(case.format, case.status, &HeaderMap::new(), &bytes(case.body));
        assert_eq!(http.status, case.status, "{:?}", case.body);
        let failure = Failure::Http { format: case.format, http };
        let what = format!("{} {} {:?}", case.format, case.status, case.body);
        wrong.extend(check(what, &failure, case.kind, case.disposition));
    }
    assert!(wrong.is_empty(), "{} bodies misclassified:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn mid_stream_error_events_classify_as_a_user_expects() {
    let mut wrong = Vec::new();
    for &(format, path, kind, disposition) in STREAM_ERRORS {
        let events = replay(format, &fixture(path));
        let failure = match events.iter().find_map(|event| event.as_ref().err()) {
            Some(failure @ Failure::StreamError { .. }) => failure.clone(),
            other => panic!("{path}: expected a mid-stream error event, got {other:?}"),
        };
        assert!(events.first().is_some_and(Result::is_ok), "{path}: the stream started first");
        wrong.extend(check(path.to_owned(), &failure, kind, disposition));
    }
    assert!(wrong.is_empty(), "{} streams misclassified:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn every_error_fixture_has_a_row() {
    for format in ["openai", "anthropic", "vertex"] {
        let dir = format!("{}/tests/fixtures/{format}/errors", env!("CARGO_MANIFEST_DIR"));
        for entry in std::fs::read_dir(&dir).expect("fixtures") {
            let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
            let path = format!("{format}/errors/{name}");
            let covered =
                ERROR_BODIES.iter().any(|case| matches!(case.body, Fixture(p) if p == path));
            assert!(covered, "no classification row for the fixture {path}");
        }
    }
}
