//! Reads an error response (status, body, headers) into a [`HttpError`]: what the provider
//! said, never what to do about it (classification lives in rein-core).
//!
//! Both formats nest the facts under `error`: OpenAI as `{"error":{"message","type","param",
//! "code"}}`, Anthropic as `{"type":"error","error":{"type","message"},"request_id"}`. Edges
//! and compatible servers vary (Anthropic's 413 omits the outer `type`, Ollama sends
//! `{"error":"text"}`, OpenRouter's `code` is a number), so every field is optional and a
//! body that is not JSON becomes the message, truncated. Pushback headers: `retry-after-ms`
//! wins over `retry-after`, which is seconds (possibly fractional) or an HTTP date measured
//! against the response's own `date` header when it has one. Without either, a 429 or 503 whose
//! message names the wait ("Please try again in 20s", OpenAI; "Please retry after 20 seconds",
//! Azure) is the server's wait too.
//!
//! Gemini's bodies are Google's: `{"error":{"code":429,"message","status":"RESOURCE_EXHAUSTED",
//! "details":[..]}}` (a one-element array of that on some streaming errors). There `status` is
//! read as the error type, the `ErrorInfo` detail's `reason` (`API_KEY_INVALID`) or else the
//! `QuotaFailure`'s first `quotaId` as the code, and the `RetryInfo` detail's `retryDelay`
//! (`"58s"`) as the server's wait when no header names one.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use rein_core::{HttpError, WireFormat};

/// Longest message kept from a body that is not JSON (an HTML error page, a proxy's text).
const MAX_TEXT_MESSAGE_CHARS: usize = 512;

/// Whether an error body is Google's: `{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
/// ..}}` (or a one-element array of it), told apart from Anthropic's `{"type": "error",
/// "error": {"type": ..}}` by the google.rpc `status` string.
pub(crate) fn is_google_error(body: &[u8]) -> bool {
    let Ok(json) = serde_json::from_slice::<Value>(body) else { return false };
    let json = match &json {
        Value::Array(items) => items.first().unwrap_or(&Value::Null),
        other => other,
    };
    json.get("error").and_then(|error| error.get("status")).is_some_and(Value::is_string)
}

/// Parses an error response. `body` may be empty or cut short; nothing here fails.
pub fn parse_http_error(
    format: WireFormat,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
) -> HttpError {
    let mut http = HttpError { status, ..HttpError::default() };
    let mut google_wait = None;
    let body_request_id = match serde_json::from_slice::<Value>(body) {
        Ok(json) if format == WireFormat::Gemini => {
            let json = match json {
                Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
                other => other,
            };
            let read = json.get("error").map(google_error).unwrap_or_else(|| error_object(&json));
            google_wait = json.get("error").and_then(google_retry_delay);
            (http.error_type, http.code, http.message) = (read.error_type, read.code, read.message);
            None
        }
        Ok(json) => {
            read_error_json(&json, &mut http);
            json.get("request_id").and_then(Value::as_str).map(str::to_owned)
        }
        Err(_) => {
            http.message = truncated_text(body);
            None
        }
    };
    if http.message.is_empty() {
        http.message = reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|code| code.canonical_reason())
            .unwrap_or("")
            .to_owned();
    }
    http.retry_after = retry_after(headers).or(google_wait).or_else(|| match status {
        429 | 503 => wait_in_message(&http.message),
        _ => None,
    });
    http.should_retry = header_str(headers, "x-should-retry").and_then(|value| {
        match value.trim().to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    });
    let (primary, secondary) = match format {
        WireFormat::OpenAi => ("x-request-id", "request-id"),
        WireFormat::Anthropic => ("request-id", "x-request-id"),
        WireFormat::Bedrock => {
            read_aws_error_type(headers, body, &mut http);
            ("x-amzn-requestid", "x-amz-request-id")
        }
        WireFormat::Gemini => ("x-request-id", "x-goog-request-id"),
    };
    http.request_id = header_str(headers, primary)
        .or_else(|| header_str(headers, secondary))
        .map(str::to_owned)
        .or(body_request_id);
    http
}

/// AWS types an error by the `x-amzn-ErrorType` header (`ThrottlingException:http://...`),
/// or the body's `__type` (`com.amazon.coral.service#ThrottlingException`); only the name
/// after any namespace is kept. The message is `message` or `Message`.
fn read_aws_error_type(headers: &HeaderMap, body: &[u8], http: &mut HttpError) {
    let json = serde_json::from_slice::<Value>(body).ok();
    let from_body = json.as_ref().and_then(|json| json.get("__type")).and_then(Value::as_str);
    let named = header_str(headers, "x-amzn-errortype").or(from_body).map(|value| {
        let value = value.split(':').next().unwrap_or(value);
        value.rsplit('#').next().unwrap_or(value).trim().to_owned()
    });
    http.error_type = named.filter(|name| !name.is_empty()).or(http.error_type.take());
    if let Some(message) = json
        .as_ref()
        .and_then(|json| json.get("Message"))
        .and_then(Value::as_str)
        .filter(|_| http.message.is_empty() || http.message == canonical_reason(http.status))
    {
        message.clone_into(&mut http.message);
    }
}

fn canonical_reason(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason())
        .unwrap_or("")
}

/// The pieces of an `{"error": ...}` object, shared with the mid-stream error events.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ErrorObject {
    pub error_type: Option<String>,
    pub code: Option<String>,
    pub message: String,
}

/// Reads `error` (object or string) or, failing that, a top-level `message`/`detail`.
pub(crate) fn error_object(json: &Value) -> ErrorObject {
    let mut out = ErrorObject::default();
    match json.get("error") {
        Some(Value::Object(error)) => {
            out.error_type = error.get("type").and_then(scalar_string);
            out.code = error.get("code").and_then(scalar_string).or_else(|| {
                // Anthropic puts the reason a 429 will not clear (a spend cap) here.
                error.get("details").and_then(|d| d.get("error_code")).and_then(scalar_string)
            });
            out.message = error.get("message").and_then(scalar_string).unwrap_or_default();
        }
        Some(Value::String(text)) => out.message = text.clone(),
        _ => {
            out.message = json
                .get("message")
                .or_else(|| json.get("detail"))
                .and_then(scalar_string)
                .unwrap_or_default();
        }
    }
    out
}

/// Reads Google's `error` object: `status` as the type, the `ErrorInfo` reason or else the
/// `QuotaFailure`'s quota id as the code, and the message.
pub(crate) fn google_error(error: &Value) -> ErrorObject {
    let details = error.get("details").and_then(Value::as_array);
    let detail = |kind: &str| {
        details
            .into_iter()
            .flatten()
            .find(|d| d.get("@type").and_then(Value::as_str).is_some_and(|t| t.ends_with(kind)))
    };
    let reason =
        detail("google.rpc.ErrorInfo").and_then(|d| d.get("reason")).and_then(scalar_string);
    let quota = detail("google.rpc.QuotaFailure")
        .and_then(|d| d.get("violations"))
        .and_then(Value::as_array)
        .and_then(|v| v.first())
        .and_then(|v| v.get("quotaId"))
        .and_then(scalar_string);
    ErrorObject {
        error_type: error.get("status").and_then(scalar_string),
        code: reason.or(quota),
        message: error.get("message").and_then(scalar_string).unwrap_or_default(),
    }
}

/// The `RetryInfo` detail's `retryDelay`, a protobuf Duration in JSON: seconds with an `s`
/// (`"58s"`, `"1.5s"`).
fn google_retry_delay(error: &Value) -> Option<Duration> {
    let details = error.get("details")?.as_array()?;
    let delay = details
        .iter()
        .find(|d| {
            d.get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"))
        })?
        .get("retryDelay")?
        .as_str()?;
    let seconds: f64 = delay.trim().strip_suffix('s')?.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)))
}

fn read_error_json(json: &Value, http: &mut HttpError) {
    let error = error_object(json);
    http.error_type = error.error_type;
    http.code = error.code;
    http.message = error.message;
}

/// A JSON string or number as text; `null`, objects and arrays give nothing.
fn scalar_string(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn truncated_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(MAX_TEXT_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

/// The server's requested wait: `retry-after-ms` first, then `retry-after`.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let ms = header_str(headers, "retry-after-ms").and_then(parse_non_negative);
    if let Some(wait) = ms.and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok()) {
        return Some(wait);
    }
    let value = header_str(headers, "retry-after")?;
    if let Some(seconds) = parse_non_negative(value) {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    wall_clock::until_http_date(value, header_str(headers, "date"))
}

/// The wait a message names: "try again in" followed by a duration as OpenAI writes it (`20s`,
/// `1.054s`, `6ms`, `7m12s`, `1h2m`), or "retry after N second(s)" as Azure does.
pub fn wait_in_message(message: &str) -> Option<Duration> {
    let lower = message.to_ascii_lowercase();
    if let Some(at) = lower.find("try again in ") {
        return go_duration(&lower[at + "try again in ".len()..]);
    }
    let at = lower.find("retry after ")?;
    let rest = &lower[at + "retry after ".len()..];
    let digits = rest.split(|c: char| !(c.is_ascii_digit() || c == '.')).next()?;
    let unit = rest[digits.len()..].trim_start();
    if !unit.starts_with("second") && !unit.starts_with("sec") {
        return None;
    }
    Duration::try_from_secs_f64(parse_non_negative(digits)?).ok()
}

/// A Go-style duration at the start of `text` (`1h2m3.5s`, `250ms`), up to what is not one.
fn go_duration(text: &str) -> Option<Duration> {
    let mut total = 0.0f64;
    let mut rest = text;
    let mut parts = 0;
    loop {
        let digits = rest.split(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap_or("");
        if digits.is_empty() {
            break;
        }
        let Some(value) = parse_non_negative(digits) else { break };
        let after = &rest[digits.len()..];
        let (scale, unit_len) = if after.starts_with("ms") {
            (0.001, 2)
        } else if after.starts_with("us") || after.starts_with("µs") {
            (0.000_001, if after.starts_with("us") { 2 } else { "µs".len() })
        } else if after.starts_with('h') {
            (3600.0, 1)
        } else if after.starts_with('m') {
            (60.0, 1)
        } else if after.starts_with('s') {
            (1.0, 1)
        } else {
            break;
        };
        total += value * scale;
        parts += 1;
        rest = &after[unit_len..];
    }
    if parts == 0 {
        return None;
    }
    Duration::try_from_secs_f64(total).ok()
}

fn parse_non_negative(text: &str) -> Option<f64> {
    let value: f64 = text.parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value)
}

/// A `Retry-After` date is a wall-clock instant, so it is measured against a wall clock: the
/// response's own `Date` header when present (immune to skew between our clock and theirs),
/// otherwise rein-core's wall-clock helper. Nothing here touches a timer.
mod wall_clock {
    use std::time::{Duration, UNIX_EPOCH};

    fn epoch_ms(http_date: &str) -> Option<u128> {
        let instant = httpdate::parse_http_date(http_date).ok()?;
        Some(instant.duration_since(UNIX_EPOCH).ok()?.as_millis())
    }

    pub(super) fn until_http_date(value: &str, date_header: Option<&str>) -> Option<Duration> {
        let target = epoch_ms(value)?;
        let now = date_header
            .and_then(epoch_ms)
            .unwrap_or_else(|| u128::from(rein_core::clock::unix_ms()));
        // A date in the past means "now".
        let wait = u64::try_from(target.saturating_sub(now)).unwrap_or(u64::MAX);
        Some(Duration::from_millis(wait))
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(HeaderName::from_static(name), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_ms_wins_and_fractions_are_kept() {
        let h = headers(&[("retry-after-ms", "1500.5"), ("retry-after", "9")]);
        assert_eq!(retry_after(&h), Some(Duration::from_micros(1_500_500)));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "0.25")])),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn retry_after_http_date_is_measured_against_the_date_header() {
        let h = headers(&[
            ("date", "Wed, 21 Oct 2015 07:28:00 GMT"),
            ("retry-after", "Wed, 21 Oct 2015 07:28:30 GMT"),
        ]);
        assert_eq!(retry_after(&h), Some(Duration::from_secs(30)));
        let past = headers(&[
            ("date", "Wed, 21 Oct 2015 07:28:00 GMT"),
            ("retry-after", "Wed, 21 Oct 2015 07:00:00 GMT"),
        ]);
        assert_eq!(retry_after(&past), Some(Duration::ZERO));
    }

    #[test]
    fn a_wait_named_in_the_message_is_read() {
        let cases = [
            ("Rate limit reached for gpt-4o ... Please try again in 20s. Visit https://x", 20_000),
            ("... on tokens per min (TPM): Limit 30000. Please try again in 1.054s.", 1_054),
            ("Please try again in 6ms.", 6),
            ("Please try again in 7m12s.", 432_000),
            ("Please try again in 1h2m.", 3_720_000),
            ("Requests ... have exceeded token rate limit. Please retry after 20 seconds.", 20_000),
            ("Please retry after 1 second.", 1_000),
        ];
        for (message, ms) in cases {
            assert_eq!(wait_in_message(message), Some(Duration::from_millis(ms)), "{message}");
        }
        for message in [
            "Please try again later.",
            "try again in a bit",
            "Rate limit reached.",
            "retry after lunch",
            "",
        ] {
            assert_eq!(wait_in_message(message), None, "{message}");
        }
    }

    #[test]
    fn a_429_body_names_the_wait_only_without_a_pushback_header() {
        let body = br#"{"error":{"message":"Rate limit reached. Please try again in 20s.","type":"requests","code":"rate_limit_exceeded"}}"#;
        let none = HeaderMap::new();
        let http = parse_http_error(WireFormat::OpenAi, 429, &none, body);
        assert_eq!(http.retry_after, Some(Duration::from_secs(20)));
        let header = headers(&[("retry-after", "3")]);
        let http = parse_http_error(WireFormat::OpenAi, 429, &header, body);
        assert_eq!(http.retry_after, Some(Duration::from_secs(3)), "the header wins");
        let http = parse_http_error(WireFormat::OpenAi, 400, &none, body);
        assert_eq!(http.retry_after, None, "only a 429 or 503 names a wait");
    }

    #[test]
    fn nonsense_retry_after_is_ignored() {
        for value in ["-1", "NaN", "inf", "soon", "1e400"] {
            assert_eq!(retry_after(&headers(&[("retry-after", value)])), None, "{value}");
        }
        let bad_ms = headers(&[("retry-after-ms", "-5"), ("retry-after", "2")]);
        assert_eq!(retry_after(&bad_ms), Some(Duration::from_secs(2)));
    }

    #[test]
    fn numeric_code_and_string_error_are_read() {
        let h = HeaderMap::new();
        let http = parse_http_error(
            WireFormat::OpenAi,
            502,
            &h,
            br#"{"error":{"message":"Provider returned error","code":502}}"#,
        );
        assert_eq!(http.code.as_deref(), Some("502"));
        let ollama =
            parse_http_error(WireFormat::OpenAi, 404, &h, br#"{"error":"model \"x\" not found"}"#);
        assert_eq!(ollama.message, "model \"x\" not found");
        assert_eq!(ollama.error_type, None);
    }

    #[test]
    fn non_json_body_is_truncated_and_empty_body_uses_the_reason() {
        let h = HeaderMap::new();
        let long = "x".repeat(2000);
        let http = parse_http_error(WireFormat::OpenAi, 502, &h, long.as_bytes());
        assert_eq!(http.message.chars().count(), MAX_TEXT_MESSAGE_CHARS + 1);
        let empty = parse_http_error(WireFormat::Anthropic, 503, &h, b"");
        assert_eq!(empty.message, "Service Unavailable");
    }

    #[test]
    fn should_retry_and_request_id_fallbacks() {
        let h = headers(&[("x-should-retry", "False"), ("x-request-id", "req_1")]);
        let http = parse_http_error(WireFormat::Anthropic, 500, &h, b"{}");
        assert_eq!(http.should_retry, Some(false));
        assert_eq!(http.request_id.as_deref(), Some("req_1"));
        let from_body = parse_http_error(WireFormat::Anthropic, 500, &HeaderMap::new(), br#"{"type":"error","error":{"type":"api_error","message":"m"},"request_id":"req_body"}"#);
        assert_eq!(from_body.request_id.as_deref(), Some("req_body"));
    }
}
