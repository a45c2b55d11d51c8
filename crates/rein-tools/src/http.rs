//! One call of an http rung: fill the URL template from the arguments, send under the rung's
//! budget (on tokio's clock, covering connect, headers and body), and say what was observed. It
//! never retries or sleeps; the ladder decides what an outcome means.
//!
//! Whether a failed request may have reached the backend matters for writes: only a refused
//! connection proves nothing was sent; anything after that (a timeout, a 5xx, a dropped
//! connection) is an unknown outcome, and the key must stay with the request.

use std::time::Duration;

use reqwest::header::HeaderValue;
use serde_json::Value;

use crate::config::compile::Problems;
use crate::ladder::HttpRung;

/// The header that carries a write's idempotency key, on every attempt and every replay.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// What one http call observed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum HttpOutcome {
    /// A 2xx with a JSON body (`null` when empty).
    Answered(Value),
    /// A 2xx whose body is not JSON. For a write the request executed all the same.
    Unparseable { body: String },
    /// A 4xx that waiting cannot fix: the tool's own answer to these arguments.
    Rejected { status: u16, message: String },
    /// A transient status (408, 409, 425, 429, 5xx), a connection failure or a broken body.
    /// `sent` is false only when the connection was refused, i.e. nothing reached the backend.
    Failed { reason: String, sent: bool },
    /// The rung's budget ran out (anywhere from connect to the last body byte).
    TimedOut,
}

/// A URL with `{name}` placeholders filled from the top-level arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UrlTemplate {
    parts: Vec<UrlPart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum UrlPart {
    Literal(String),
    Arg(String),
}

impl UrlTemplate {
    /// Parse `template` (config key `key`), recording problems by key.
    pub fn parse(template: &str, key: &str, problems: &mut Problems) -> Option<UrlTemplate> {
        match Self::try_parse(template) {
            Ok(url) => Some(url),
            Err(message) => {
                problems.add(key, message);
                None
            }
        }
    }

    fn try_parse(template: &str) -> Result<UrlTemplate, String> {
        if !(template.starts_with("http://") || template.starts_with("https://")) {
            return Err(format!("`{template}` must start with http:// or https://"));
        }
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find(['{', '}']) {
            if rest[open..].starts_with('}') {
                return Err(format!("`{template}` has a `}}` without its `{{`"));
            }
            if open > 0 {
                parts.push(UrlPart::Literal(rest[..open].to_string()));
            }
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else {
                return Err(format!("`{template}` has a `{{` without its `}}`"));
            };
            let name = &after[..close];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "`{{{name}}}` in `{template}` is not a placeholder: name a top-level argument (letters, digits, _)"
                ));
            }
            parts.push(UrlPart::Arg(name.to_string()));
            rest = &after[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(UrlPart::Literal(rest.to_string()));
        }
        let url = UrlTemplate { parts };
        let sample = url.render(|_| Some("x".to_string()));
        if let Err(error) = reqwest::Url::parse(&sample) {
            return Err(format!("`{template}` is not a valid URL: {error}"));
        }
        Ok(url)
    }

    /// The URL for these arguments, or what is wrong with them.
    pub fn fill(&self, args: &Value) -> Result<String, String> {
        let mut problem = None;
        let url = self.render(|name| match args.get(name) {
            Some(Value::String(s)) => Some(encode(s)),
            Some(Value::Number(n)) => Some(encode(&n.to_string())),
            Some(Value::Bool(b)) => Some(b.to_string()),
            Some(_) => {
                problem.get_or_insert_with(|| {
                    format!("argument `{name}` must be a string or a number (it goes in the URL)")
                });
                None
            }
            None => {
                problem.get_or_insert_with(|| format!("argument `{name}` is required"));
                None
            }
        });
        match problem {
            Some(problem) => Err(problem),
            None => Ok(url),
        }
    }

    fn render(&self, mut value: impl FnMut(&str) -> Option<String>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                UrlPart::Literal(text) => out.push_str(text),
                UrlPart::Arg(name) => out.push_str(&value(name).unwrap_or_default()),
            }
        }
        out
    }
}

/// Percent-encode everything but RFC 3986's unreserved characters, so an argument stays inside
/// its path segment or query value.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Send one request for `rung` to `url`, bounded by `budget`.
pub(crate) async fn send(
    client: &reqwest::Client,
    rung: &HttpRung,
    url: &str,
    args: &Value,
    idempotency_key: Option<&str>,
    budget: Duration,
) -> HttpOutcome {
    let mut request = client.request(rung.method.clone(), url).headers(rung.headers.clone());
    if let Some(key) = idempotency_key {
        match HeaderValue::from_str(key) {
            Ok(value) => request = request.header(IDEMPOTENCY_KEY_HEADER, value),
            Err(_) => {
                return HttpOutcome::Failed {
                    reason: "the idempotency key is not a valid header value".into(),
                    sent: false,
                };
            }
        }
    }
    if rung.body_args {
        request = request.json(args);
    }
    let exchange = async {
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                return HttpOutcome::Failed { reason: describe(&error), sent: !error.is_connect() };
            }
        };
        let status = response.status().as_u16();
        match response.bytes().await {
            Ok(body) => classify(status, &body),
            Err(error) => HttpOutcome::Failed {
                reason: format!("status {status}, body cut off: {}", describe(&error)),
                sent: true,
            },
        }
    };
    tokio::time::timeout(budget, exchange).await.unwrap_or(HttpOutcome::TimedOut)
}

/// What a response means, from its status and body.
pub(crate) fn classify(status: u16, body: &[u8]) -> HttpOutcome {
    match status {
        200..=299 => {
            if body.iter().all(u8::is_ascii_whitespace) {
                return HttpOutcome::Answered(Value::Null);
            }
            match serde_json::from_slice(body) {
                Ok(value) => HttpOutcome::Answered(value),
                Err(_) => {
                    HttpOutcome::Unparseable { body: String::from_utf8_lossy(body).into_owned() }
                }
            }
        }
        408 | 409 | 425 | 429 | 500..=599 => HttpOutcome::Failed {
            reason: match backend_message(body) {
                Some(message) => format!("status {status}: {message}"),
                None => format!("status {status}"),
            },
            sent: true,
        },
        400..=499 => HttpOutcome::Rejected {
            status,
            message: backend_message(body).unwrap_or_else(|| format!("status {status}")),
        },
        _ => HttpOutcome::Failed { reason: format!("unexpected status {status}"), sent: true },
    }
}

/// The backend's own words about a failure: `message`, `error` (or `error.message`), `detail`,
/// else the body's text, cut to a sentence's length.
pub(crate) fn backend_message(body: &[u8]) -> Option<String> {
    const MAX: usize = 300;
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(value) => {
            let pick = |v: &Value| v.as_str().map(str::to_string);
            value
                .get("message")
                .and_then(pick)
                .or_else(|| value.get("error").and_then(pick))
                .or_else(|| value.pointer("/error/message").and_then(pick))
                .or_else(|| value.get("detail").and_then(pick))
                .unwrap_or_else(|| value.to_string())
        }
        Err(_) => String::from_utf8_lossy(body).trim().to_string(),
    };
    if text.is_empty() || text == "null" {
        return None;
    }
    Some(if text.chars().count() > MAX {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    } else {
        text
    })
}

/// A transport error in words, without the URL (it may carry argument values).
fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_connect() {
        "connection failed"
    } else if error.is_timeout() {
        "timed out"
    } else if error.is_body() || error.is_decode() {
        "broken body"
    } else {
        "request failed"
    };
    let mut source = std::error::Error::source(error);
    let mut root = None;
    while let Some(cause) = source {
        root = Some(cause.to_string());
        source = cause.source();
    }
    match root {
        Some(root) => format!("{kind}: {root}"),
        None => kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn template(text: &str) -> Result<UrlTemplate, Vec<String>> {
        let mut problems = Problems::default();
        UrlTemplate::parse(text, "k", &mut problems).ok_or_else(|| problems.messages())
    }

    #[test]
    fn fills_and_encodes_arguments() {
        let url = template("http://127.0.0.1:9000/search/{q}?team={team}").unwrap();
        assert_eq!(
            url.fill(&json!({"q": "runbook restore/ü?&", "team": 7})).unwrap(),
            "http://127.0.0.1:9000/search/runbook%20restore%2F%C3%BC%3F%26?team=7"
        );
        assert_eq!(url.fill(&json!({"team": 7})).unwrap_err(), "argument `q` is required");
        assert!(url.fill(&json!({"q": {"a": 1}, "team": 1})).unwrap_err().contains("`q`"));
    }

    #[test]
    fn rejects_bad_templates() {
        for bad in [
            "ftp://x/{q}",
            "http://x/{q",
            "http://x/q}",
            "http://x/{}",
            "http://x/{a-b}",
            "http://exa mple.com/{q}",
        ] {
            assert!(template(bad).is_err(), "{bad} should be rejected");
        }
        assert!(template("https://example.com/v1/refunds").is_ok());
    }

    #[test]
    fn classifies_statuses() {
        assert_eq!(classify(200, br#"{"a":1}"#), HttpOutcome::Answered(json!({"a": 1})));
        assert_eq!(classify(204, b""), HttpOutcome::Answered(Value::Null));
        assert!(matches!(classify(200, b"<html>"), HttpOutcome::Unparseable { .. }));
        assert_eq!(
            classify(400, br#"{"error":{"message":"amount must be positive"}}"#),
            HttpOutcome::Rejected { status: 400, message: "amount must be positive".into() }
        );
        assert_eq!(
            classify(404, b"no such order"),
            HttpOutcome::Rejected { status: 404, message: "no such order".into() }
        );
        for transient in [408, 409, 425, 429, 500, 503] {
            assert!(
                matches!(classify(transient, b""), HttpOutcome::Failed { sent: true, .. }),
                "{transient}"
            );
        }
        assert!(matches!(classify(302, b""), HttpOutcome::Failed { .. }));
    }

    #[test]
    fn backend_messages_are_cut_short() {
        let long = "x".repeat(1000);
        let message = backend_message(long.as_bytes()).unwrap();
        assert_eq!(message.chars().count(), 301);
        assert_eq!(backend_message(b"  "), None);
        assert_eq!(backend_message(br#"{"detail":"bad q"}"#).as_deref(), Some("bad q"));
    }
}
