//! Cassettes: real provider exchanges kept as a versioned JSON file, for replay in tests.
//!
//! `{"version": 1, "interactions": [...]}`; each interaction is the request (method, path with
//! its query, headers, body, and the `match` key a replay compares) and the response (status,
//! headers, the body bytes exactly as received: for a stream, the whole byte stream, with the
//! sizes of the chunks as they arrived, and `cut` when the upstream broke it off). A body is
//! `{"text": "..."}` when it is UTF-8, else `{"base64": "..."}`. Headers are `"name: value"`
//! lines in the order received. Everything written was scrubbed first (see [`crate::scrub`]):
//! credential headers read `[scrubbed]` and no secret value remains anywhere.
//!
//! A request's match key is the SHA-256 of its body in canonical form: a JSON body parsed and
//! written back with sorted keys and no whitespace (so key order and spacing do not matter),
//! any other body as its bytes. A replay compares JSON bodies as parsed JSON, where a recorded
//! string holding `[scrubbed]` matches any value in the scrubbed part's place (the replay
//! cannot know the secret that was there), and paths the same way. A file is written whole to
//! a temporary file and renamed over the old one, so a crash never leaves half a cassette.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::scrub::SCRUBBED;

/// The cassette format this build reads and writes.
pub const VERSION: u32 = 1;

/// Recorded exchanges, in the order they finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cassette {
    pub version: u32,
    pub interactions: Vec<Interaction>,
}

/// One request and the response it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interaction {
    pub request: RecordedRequest,
    pub response: RecordedResponse,
}

/// A request as recorded (scrubbed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedRequest {
    pub method: String,
    /// The path with its query string, as the client sent it to the recorder.
    pub path: String,
    #[serde(default, with = "header_lines")]
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// `sha256:<hex>` of the body in canonical form ([`match_key`]); informational when read
    /// (a replay computes it again from the body).
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub match_key: Option<String>,
}

/// A response as recorded (scrubbed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedResponse {
    pub status: u16,
    #[serde(default, with = "header_lines")]
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// The sizes of the body's chunks as they arrived (a stream's), when scrubbing left the
    /// body as it was; a replay sends the body in the same pieces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<usize>>,
    /// The upstream broke the body off after these bytes; a replay cuts the connection there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// A body: text when it is UTF-8, else base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Body {
    Text(String),
    Base64(String),
}

/// Why a cassette could not be read or written. Names the file, never its contents.
#[derive(Debug, thiserror::Error)]
pub enum CassetteError {
    #[error("cannot read the cassette {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write the cassette {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{origin} is not a valid cassette: {source}")]
    Parse { origin: String, source: serde_json::Error },
    #[error("{origin} is a cassette of version {found}; this rein reads version {VERSION}")]
    Version { origin: String, found: u32 },
    #[error("{origin}: interaction {index}: {message}")]
    Interaction { origin: String, index: usize, message: String },
}

impl Body {
    /// The body of `bytes`: text when it is UTF-8.
    pub fn of(bytes: &[u8]) -> Body {
        match std::str::from_utf8(bytes) {
            Ok(text) => Body::Text(text.to_string()),
            Err(_) => Body::Base64(base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    }

    /// The bytes, or why a base64 body does not decode.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            Body::Text(text) => Ok(text.as_bytes().to_vec()),
            Body::Base64(encoded) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("the body is not valid base64: {e}")),
        }
    }
}

impl Default for Cassette {
    fn default() -> Self {
        Cassette { version: VERSION, interactions: Vec::new() }
    }
}

impl Cassette {
    /// An empty cassette of the current version.
    pub fn new() -> Cassette {
        Cassette::default()
    }

    /// Parses and checks a cassette; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Cassette, CassetteError> {
        // The version first, so a newer file says so instead of failing on a field.
        let raw: Value = serde_json::from_str(text)
            .map_err(|source| CassetteError::Parse { origin: origin.to_string(), source })?;
        if let Some(found) = raw.get("version").and_then(Value::as_u64)
            && found != u64::from(VERSION)
        {
            return Err(CassetteError::Version {
                origin: origin.to_string(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
            });
        }
        let cassette: Cassette = serde_json::from_value(raw)
            .map_err(|source| CassetteError::Parse { origin: origin.to_string(), source })?;
        for (index, interaction) in cassette.interactions.iter().enumerate() {
            let fail = |message: String| CassetteError::Interaction {
                origin: origin.to_string(),
                index,
                message,
            };
            let request = &interaction.request;
            if http::Method::from_bytes(request.method.as_bytes()).is_err() {
                return Err(fail(format!("`{}` is not an HTTP method", request.method)));
            }
            if !request.path.starts_with('/') || request.path.parse::<http::Uri>().is_err() {
                return Err(fail(format!("`{}` is not a path", request.path)));
            }
            request.body.bytes().map_err(|m| fail(format!("request: {m}")))?;
            let response = &interaction.response;
            if http::StatusCode::from_u16(response.status).is_err() {
                return Err(fail(format!("{} is not an HTTP status", response.status)));
            }
            response.body.bytes().map_err(|m| fail(format!("response: {m}")))?;
        }
        Ok(cassette)
    }

    /// Reads and checks the cassette at `path`.
    pub fn from_file(path: &Path) -> Result<Cassette, CassetteError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| CassetteError::Read { path: path.to_path_buf(), source })?;
        Cassette::parse(&text, &path.display().to_string())
    }

    /// The cassette as the file holds it (pretty JSON, a newline at the end).
    pub fn to_json(&self) -> String {
        // Strings, numbers and lists of them: serializing cannot fail.
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Writes the cassette to a temporary file beside `path` and renames it over `path`.
    pub async fn write_atomically(&self, path: &Path) -> Result<(), CassetteError> {
        let fail = |source| CassetteError::Write { path: path.to_path_buf(), source };
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(format!(".{}.tmp", std::process::id()));
        let temporary = PathBuf::from(temporary);
        let text = serde_json::to_string_pretty(self)
            .map_err(|error| fail(std::io::Error::other(error)))?
            + "\n";
        let result = async {
            let mut file = tokio::fs::File::create(&temporary).await?;
            tokio::io::AsyncWriteExt::write_all(&mut file, text.as_bytes()).await?;
            file.sync_all().await?;
            drop(file);
            tokio::fs::rename(&temporary, path).await
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&temporary).await;
        }
        result.map_err(fail)
    }
}

/// Headers as `"name: value"` lines.
mod header_lines {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        headers: &[(String, String)],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(headers.iter().map(|(name, value)| format!("{name}: {value}")))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<(String, String)>, D::Error> {
        Vec::<String>::deserialize(deserializer)?
            .into_iter()
            .map(|line| match line.split_once(':') {
                Some((name, value)) if !name.trim().is_empty() => Ok((
                    name.trim().to_string(),
                    value.strip_prefix(' ').unwrap_or(value).to_string(),
                )),
                _ => {
                    Err(D::Error::custom(format!("`{line}` is not a header line (`name: value`)")))
                }
            })
            .collect()
    }
}

/// A body in canonical form: JSON with sorted keys and no whitespace, else the bytes.
pub(crate) fn canonical(body: &[u8]) -> (Vec<u8>, Option<Value>) {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) if !body.is_empty() => {
            let mut out = String::new();
            write_canonical(&value, &mut out);
            (out.into_bytes(), Some(value))
        }
        _ => (body.to_vec(), None),
    }
}

/// `sha256:<hex>` of a body in canonical form.
pub fn match_key(body: &[u8]) -> String {
    let (canonical, _) = canonical(body);
    hash(&canonical)
}

pub(crate) fn hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256:{hex}")
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Whether a request sent now matches a recorded value: equal, except that a recorded string
/// holding `[scrubbed]` matches any string with one or more characters in its place (a
/// scrubbed value is unknown, so whatever key the replay's client sends matches it).
pub(crate) fn json_matches(recorded: &Value, sent: &Value) -> bool {
    match (recorded, sent) {
        (Value::String(pattern), Value::String(text)) => glob_matches(pattern, text),
        (Value::Object(r), Value::Object(s)) => {
            r.len() == s.len()
                && r.iter().all(|(k, v)| s.get(k).is_some_and(|w| json_matches(v, w)))
        }
        (Value::Array(r), Value::Array(s)) => {
            r.len() == s.len() && r.iter().zip(s).all(|(a, b)| json_matches(a, b))
        }
        _ => recorded == sent,
    }
}

/// Whether `text` matches `pattern`, where each `[scrubbed]` stands for one or more characters.
pub(crate) fn glob_matches(pattern: &str, text: &str) -> bool {
    match pattern.split_once(SCRUBBED) {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else { return false };
            rest.char_indices()
                .map(|(i, _)| i)
                .skip(1)
                .chain([rest.len()])
                .filter(|&i| i > 0)
                .any(|i| glob_matches(tail, &rest[i..]))
        }
    }
}

/// The JSON pointer of the first place a recorded value and a sent one differ (`""` for the
/// whole value), by [`json_matches`].
pub(crate) fn first_difference(a: &Value, b: &Value) -> Option<String> {
    fn walk(a: &Value, b: &Value, at: &str) -> Option<String> {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                keys.into_iter().find_map(|key| {
                    let here = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                    match (x.get(key), y.get(key)) {
                        (Some(a), Some(b)) => walk(a, b, &here),
                        _ => Some(here),
                    }
                })
            }
            (Value::Array(x), Value::Array(y)) => {
                let found = x
                    .iter()
                    .zip(y)
                    .enumerate()
                    .find_map(|(i, (a, b))| walk(a, b, &format!("{at}/{i}")));
                match found {
                    Some(found) => Some(found),
                    None if x.len() != y.len() => Some(format!("{at}/{}", x.len().min(y.len()))),
                    None => None,
                }
            }
            _ if json_matches(a, b) => None,
            _ => Some(at.to_string()),
        }
    }
    walk(a, b, "")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_bodies_match_whatever_their_key_order_and_spacing() {
        let a = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let b =
            b"{ \"messages\": [ {\"content\": \"hi\", \"role\": \"user\"} ],\n \"model\": \"m\" }";
        assert_eq!(match_key(a), match_key(b));
        assert_ne!(match_key(a), match_key(br#"{"model":"n","messages":[]}"#));
        assert_eq!(match_key(b"not json"), hash(b"not json"));
        assert!(match_key(b"").starts_with("sha256:"));
    }

    #[test]
    fn the_first_difference_is_a_json_pointer() {
        let a = json!({"model": "m", "messages": [{"content": "hi"}]});
        let b = json!({"model": "m", "messages": [{"content": "ho"}]});
        assert_eq!(first_difference(&a, &b).as_deref(), Some("/messages/0/content"));
        assert_eq!(first_difference(&a, &a), None);
        let c = json!({"model": "m", "messages": [{"content": "hi"}, {"content": "x"}]});
        assert_eq!(first_difference(&a, &c).as_deref(), Some("/messages/1"));
    }

    #[test]
    fn a_scrubbed_value_matches_any_value_in_its_place() {
        assert!(glob_matches("[scrubbed]", "sk-anything"));
        assert!(glob_matches("Bearer [scrubbed]", "Bearer sk-1"));
        assert!(glob_matches("/v1/x?key=[scrubbed]&a=1", "/v1/x?key=k&a=1"));
        assert!(!glob_matches("/v1/x?key=[scrubbed]&a=1", "/v1/x?key=&a=1"), "one or more");
        assert!(!glob_matches("/v1/x?key=[scrubbed]&a=1", "/v1/x?key=k&a=2"));
        assert!(glob_matches("a[scrubbed]b[scrubbed]c", "a1b2b3c"));
        let recorded = json!({"user": "[scrubbed]", "messages": [{"content": "hi"}]});
        assert!(json_matches(&recorded, &json!({"messages": [{"content": "hi"}], "user": "sk-2"})));
        assert!(!json_matches(
            &recorded,
            &json!({"messages": [{"content": "ho"}], "user": "sk-2"})
        ));
        assert!(!json_matches(&recorded, &json!({"messages": [{"content": "hi"}], "user": 3})));
        assert!(!json_matches(&recorded, &json!({"messages": [{"content": "hi"}]})));
    }

    #[test]
    fn headers_are_name_value_lines() {
        let mut cassette = Cassette::new();
        cassette.interactions.push(Interaction {
            request: RecordedRequest {
                method: "GET".into(),
                path: "/v1/models".into(),
                headers: vec![("authorization".into(), "[scrubbed]".into())],
                body: Body::Text(String::new()),
                match_key: None,
            },
            response: RecordedResponse {
                status: 200,
                headers: vec![("x-empty".into(), String::new()), ("a".into(), "b: c".into())],
                body: Body::Text("{}".into()),
                chunks: None,
                cut: false,
            },
        });
        let text = cassette.to_json();
        assert!(text.contains(r#""authorization: [scrubbed]""#), "{text}");
        assert!(text.contains(r#""a: b: c""#), "{text}");
        assert_eq!(Cassette::parse(&text, "c.json").unwrap(), cassette);
        let bad = text.replace("authorization: [scrubbed]", "no colon");
        let error = Cassette::parse(&bad, "c.json").unwrap_err().to_string();
        assert!(error.contains("`no colon` is not a header line"), "{error}");
    }

    #[test]
    fn bodies_are_text_when_utf8_and_base64_otherwise() {
        assert_eq!(Body::of(b"hi"), Body::Text("hi".into()));
        let binary = Body::of(&[0xff, 0x00, 0x10]);
        assert!(matches!(binary, Body::Base64(_)));
        assert_eq!(binary.bytes().unwrap(), vec![0xff, 0x00, 0x10]);
    }

    #[test]
    fn a_bad_cassette_says_what_and_where() {
        let error = Cassette::parse("{\"version\": 1, \"interactions\": [", "c.json").unwrap_err();
        assert!(error.to_string().starts_with("c.json is not a valid cassette"), "{error}");
        let error = Cassette::parse(r#"{"version": 2, "interactions": []}"#, "c.json").unwrap_err();
        assert_eq!(
            error.to_string(),
            "c.json is a cassette of version 2; this rein reads version 1"
        );
        let bad = r#"{"version": 1, "interactions": [{"request": {"method": "POST", "path": "/v1/x",
            "body": {"base64": "!!"}}, "response": {"status": 200, "body": {"text": ""}}}]}"#;
        let error = Cassette::parse(bad, "c.json").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("c.json: interaction 0: request: the body is not valid base64"),
            "{error}"
        );
    }
}
