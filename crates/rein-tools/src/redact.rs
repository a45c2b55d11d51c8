//! Redaction of the secrets rein sends to tool backends. Every value read from the environment
//! for `headers_env` is a secret: a backend that echoes it (an auth error quoting the header,
//! a debug body) must not put it into the envelope the model reads, a log line, the outbox's
//! `last_error` or a stored result. What a backend says enters rein in one place
//! (`http::send`), and everything it returns passes through [`Redactor`] there, before any
//! message is cut short (a cut could otherwise keep half a token).
//!
//! Each secret is redacted whole and, for a value with an auth scheme (`Bearer x`, `Basic x`),
//! as its credential alone, also in its JSON-escaped spelling.

use crate::http::HttpOutcome;
use serde_json::{Map, Value};

/// What a redacted secret becomes.
pub(crate) const REDACTED: &str = "[redacted]";

/// The secrets to strip from anything a backend says, longest first.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// Add the value of a secret header.
    pub(crate) fn add(&mut self, value: &str) {
        let mut pieces = vec![value.trim().to_string()];
        // `Bearer <token>`: the token alone is as secret as the whole value.
        let mut words = value.split_whitespace();
        if words.next().is_some() {
            pieces.extend(words.map(str::to_string));
        }
        for piece in pieces {
            if piece.is_empty() {
                continue;
            }
            // A backend that puts the value into a JSON string escapes `"` and `\`.
            let quoted = Value::String(piece.clone()).to_string();
            let escaped = quoted
                .strip_prefix('"')
                .and_then(|q| q.strip_suffix('"'))
                .unwrap_or(&quoted)
                .to_string();
            for form in [piece, escaped] {
                if !self.secrets.contains(&form) {
                    self.secrets.push(form);
                }
            }
        }
        self.secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub(crate) fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// `value` with every secret replaced in its strings and object keys.
    pub(crate) fn value(&self, value: Value) -> Value {
        if self.secrets.is_empty() {
            return value;
        }
        match value {
            Value::String(text) => Value::String(self.text(&text)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(key, item)| (self.text(&key), self.value(item)))
                    .collect::<Map<String, Value>>(),
            ),
            scalar => scalar,
        }
    }

    /// A backend's answer with every secret replaced in what it says.
    pub(crate) fn outcome(&self, outcome: HttpOutcome) -> HttpOutcome {
        match outcome {
            HttpOutcome::Answered(value) => HttpOutcome::Answered(self.value(value)),
            HttpOutcome::Unparseable { body } => {
                HttpOutcome::Unparseable { body: self.text(&body) }
            }
            HttpOutcome::Rejected { status, message } => {
                HttpOutcome::Rejected { status, message: self.text(&message) }
            }
            HttpOutcome::Unauthorized { status, message } => {
                HttpOutcome::Unauthorized { status, message: self.text(&message) }
            }
            HttpOutcome::Failed { reason, may_have_executed } => {
                HttpOutcome::Failed { reason: self.text(&reason), may_have_executed }
            }
            HttpOutcome::TimedOut => HttpOutcome::TimedOut,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_are_redacted_whole_and_as_their_token_everywhere() {
        let mut redactor = Redactor::default();
        redactor.add("Bearer tok-\"123\"");
        redactor.add("plain-key");
        assert_eq!(
            redactor.text("got Bearer tok-\"123\", want other"),
            "got [redacted], want other"
        );
        assert_eq!(redactor.text("token tok-\"123\" is wrong"), "token [redacted] is wrong");
        assert_eq!(redactor.text(r#"{"auth":"Bearer tok-\"123\""}"#), r#"{"auth":"[redacted]"}"#);
        assert_eq!(redactor.text("x plain-key y"), "x [redacted] y");
        assert_eq!(redactor.text("Bearer alone"), "Bearer alone", "the scheme is no secret");
        let value =
            redactor.value(json!({"a": ["tok-\"123\"", 1], "plain-key": {"b": "plain-key"}}));
        assert_eq!(value, json!({"a": ["[redacted]", 1], "[redacted]": {"b": "[redacted]"}}));
        assert_eq!(format!("{redactor:?}"), "Redactor(5 secrets)");
    }
}
