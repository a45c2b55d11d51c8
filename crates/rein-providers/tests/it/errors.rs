//! Recorded error bodies of both providers read into `HttpError`, and the pushback headers
//! read end to end through a real HTTP response.

use std::time::Duration;

use rein_core::{Failure, HttpError, Provider, WireFormat};
use rein_providers::{ChatRequest, parse_http_error};
use reqwest::header::HeaderMap;

use crate::server::{Reply, response, serve};
use crate::{anthropic, fixture, openai};

struct Case {
    format: WireFormat,
    file: &'static str,
    status: u16,
    error_type: Option<&'static str>,
    code: Option<&'static str>,
    message_starts: &'static str,
    request_id: Option<&'static str>,
}

const fn case(
    format: WireFormat,
    file: &'static str,
    status: u16,
    error_type: Option<&'static str>,
    code: Option<&'static str>,
    message_starts: &'static str,
    request_id: Option<&'static str>,
) -> Case {
    Case { format, file, status, error_type, code, message_starts, request_id }
}

const OPENAI: WireFormat = WireFormat::OpenAi;
const ANTHROPIC: WireFormat = WireFormat::Anthropic;

const CASES: &[Case] = &[
    case(
        OPENAI,
        "openai/errors/429_rate_limit_exceeded.json",
        429,
        Some("tokens"),
        Some("rate_limit_exceeded"),
        "Rate limit reached for 10KTPM-200RPM",
        None,
    ),
    case(
        OPENAI,
        "openai/errors/429_insufficient_quota.json",
        429,
        Some("insufficient_quota"),
        Some("insufficient_quota"),
        "You exceeded your current quota",
        None,
    ),
    case(
        OPENAI,
        "openai/errors/400_context_length_exceeded.json",
        400,
        Some("invalid_request_error"),
        Some("context_length_exceeded"),
        "This model's maximum context length is 4097 tokens",
        None,
    ),
    case(
        OPENAI,
        "openai/errors/400_content_filter.json",
        400,
        None,
        Some("content_filter"),
        "The response was filtered due to the prompt triggering",
        None,
    ),
    case(
        OPENAI,
        "openai/errors/401_invalid_api_key.json",
        401,
        Some("invalid_request_error"),
        Some("invalid_api_key"),
        "Incorrect API key provided",
        None,
    ),
    case(
        OPENAI,
        "openai/errors/500_server_error.json",
        500,
        Some("server_error"),
        None,
        "The server had an error processing your request",
        None,
    ),
    case(
        OPENAI,
        "openai/errors/503_model_overloaded.json",
        503,
        Some("server_error"),
        None,
        "That model is currently overloaded",
        None,
    ),
    case(
        OPENAI,
        "openai/errors/503_server_is_overloaded.json",
        503,
        Some("service_unavailable_error"),
        Some("server_is_overloaded"),
        "Our servers are currently overloaded",
        None,
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/529_overloaded_error.json",
        529,
        Some("overloaded_error"),
        None,
        "Overloaded",
        None,
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/429_rate_limit_error.json",
        429,
        Some("rate_limit_error"),
        None,
        "This request would exceed your account's rate limit",
        Some("req_011CcR9mkMvXdaiWP4739PSN"),
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/429_rate_limit_error_org_itpm.json",
        429,
        Some("rate_limit_error"),
        None,
        "This request would exceed the rate limit for your organization",
        None,
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/429_spend_limit_constructed.json",
        429,
        Some("rate_limit_error"),
        Some("enforced_spend_limit_reached"),
        "You have reached your monthly spend limit",
        Some("req_constructed_spend_limit"),
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/400_prompt_too_long.json",
        400,
        Some("invalid_request_error"),
        None,
        "prompt is too long: 203284 tokens > 200000 maximum",
        Some("req_011Cb691naMZfUYHaJNPd2Xh"),
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/400_credit_balance_too_low.json",
        400,
        Some("invalid_request_error"),
        None,
        "Your credit balance is too low",
        Some("req_011CbrFTcXhtiMzr3s6EocF7"),
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/401_authentication_error.json",
        401,
        Some("authentication_error"),
        None,
        "invalid x-api-key",
        Some("req_011CYhr1kdGzCrPHfrhibMen"),
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/403_permission_error.json",
        403,
        Some("permission_error"),
        None,
        "Permission denied",
        Some("req_011CaH53rCYtDAVnwhLQvkuc"),
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/404_not_found_error.json",
        404,
        Some("not_found_error"),
        None,
        "The requested resource could not be found.",
        Some("req_011CSHoEeqs5C35K2UUqR7Fy"),
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/413_request_too_large.json",
        413,
        Some("request_too_large"),
        None,
        "Request exceeds the maximum size",
        None,
    ),
    case(
        ANTHROPIC,
        "anthropic/errors/500_api_error.json",
        500,
        Some("api_error"),
        None,
        "Internal server error",
        Some("req_011CVT1TGNi4VcKHaM5xKGTs"),
    ),
];

#[test]
fn recorded_error_bodies_parse() {
    for case in CASES {
        let http =
            parse_http_error(case.format, case.status, &HeaderMap::new(), &fixture(case.file));
        assert_eq!(http.status, case.status, "{}", case.file);
        assert_eq!(http.error_type.as_deref(), case.error_type, "{}", case.file);
        assert_eq!(http.code.as_deref(), case.code, "{}", case.file);
        assert!(http.message.starts_with(case.message_starts), "{}: {}", case.file, http.message);
        assert_eq!(http.request_id.as_deref(), case.request_id, "{}", case.file);
        // No pushback header in these recordings; OpenAI's rate-limit message names its wait
        // ("Please try again in 6ms."), which is the server's wait too.
        let named = case.file.ends_with("429_rate_limit_exceeded.json");
        let wait = named.then(|| std::time::Duration::from_millis(6));
        assert_eq!(http.retry_after, wait, "{}", case.file);
        assert_eq!(http.should_retry, None, "{}", case.file);
    }
}

fn http_failure(result: Result<rein_core::EventStream, Failure>) -> (WireFormat, HttpError) {
    match result {
        Err(Failure::Http { format, http }) => (format, http),
        Err(other) => panic!("expected an HTTP failure, got {other:?}"),
        Ok(_) => panic!("expected an HTTP failure, got a stream"),
    }
}

#[tokio::test]
async fn anthropic_529_with_pushback_headers_end_to_end() {
    let body = fixture("anthropic/errors/529_overloaded_error.json");
    let headers = [
        ("content-type", "application/json"),
        ("request-id", "req_01RCc7MbLyQNtGKzBTv8VCep"),
        ("x-should-retry", "true"),
        ("retry-after", "7"),
    ];
    let server = serve(Reply::Pieces(vec![response(529, &headers, &body)])).await;
    let provider = anthropic(&server.base_url);
    let (format, http) = http_failure(provider.send(&ChatRequest::default()).await);
    assert_eq!(format, WireFormat::Anthropic);
    assert_eq!(
        http,
        HttpError {
            status: 529,
            error_type: Some("overloaded_error".into()),
            code: None,
            message: "Overloaded".into(),
            retry_after: Some(Duration::from_secs(7)),
            should_retry: Some(true),
            request_id: Some("req_01RCc7MbLyQNtGKzBTv8VCep".into()),
        }
    );
}

#[tokio::test]
async fn openai_429_retry_after_ms_wins_over_retry_after() {
    let body = fixture("openai/errors/429_rate_limit_exceeded.json");
    let headers = [
        ("content-type", "application/json"),
        ("x-request-id", "req_abc"),
        ("retry-after-ms", "6"),
        ("retry-after", "1"),
    ];
    let server = serve(Reply::Pieces(vec![response(429, &headers, &body)])).await;
    let (format, http) = http_failure(openai(&server.base_url).send(&ChatRequest::default()).await);
    assert_eq!(format, WireFormat::OpenAi);
    assert_eq!(http.code.as_deref(), Some("rate_limit_exceeded"));
    assert_eq!(http.retry_after, Some(Duration::from_millis(6)));
    assert_eq!(http.request_id.as_deref(), Some("req_abc"));
}

#[tokio::test]
async fn retry_after_http_date_is_measured_against_the_response_date() {
    let headers = [
        ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ("retry-after", "Sun, 06 Nov 1994 08:49:49 GMT"),
    ];
    let server = serve(Reply::Pieces(vec![response(503, &headers, b"")])).await;
    let (_, http) = http_failure(openai(&server.base_url).send(&ChatRequest::default()).await);
    assert_eq!(http.retry_after, Some(Duration::from_secs(12)));
    assert_eq!(http.message, "Service Unavailable");
}

#[tokio::test]
async fn retry_after_date_in_the_past_is_zero() {
    // No `date` header: compared with the system clock, 1994 is long past.
    let headers = [("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT"), ("retry-after-ms", "junk")];
    let server = serve(Reply::Pieces(vec![response(429, &headers, b"{}")])).await;
    let (_, http) = http_failure(anthropic(&server.base_url).send(&ChatRequest::default()).await);
    assert_eq!(http.retry_after, Some(Duration::ZERO));
}

#[tokio::test]
async fn fractional_retry_after_seconds() {
    let server = serve(Reply::Pieces(vec![response(429, &[("retry-after", "1.5")], b"{}")])).await;
    let (_, http) = http_failure(openai(&server.base_url).send(&ChatRequest::default()).await);
    assert_eq!(http.retry_after, Some(Duration::from_millis(1500)));
}

#[tokio::test]
async fn html_error_page_from_a_proxy_becomes_the_truncated_message() {
    let page = format!("<html><body><h1>502 Bad Gateway</h1>{}</body></html>", "x".repeat(4000));
    let headers = [("content-type", "text/html")];
    let server = serve(Reply::Pieces(vec![response(502, &headers, page.as_bytes())])).await;
    let (_, http) = http_failure(openai(&server.base_url).send(&ChatRequest::default()).await);
    assert_eq!(http.status, 502);
    assert!(http.message.starts_with("<html><body><h1>502 Bad Gateway</h1>"));
    assert!(http.message.chars().count() < 600, "{}", http.message.len());
    assert_eq!(http.error_type, None);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let headers = [("location", "http://127.0.0.1:9/elsewhere")];
    let server = serve(Reply::Pieces(vec![response(307, &headers, b"")])).await;
    let (_, http) = http_failure(openai(&server.base_url).send(&ChatRequest::default()).await);
    assert_eq!(http.status, 307);
}
