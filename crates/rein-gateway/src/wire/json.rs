//! Shared reading of request bodies: JSON into typed raw structs with the path of any bad field
//! (through `serde_path_to_error`), the "string or array" shapes both formats use, and the
//! fields rein does not model, kept for `ChatRequest::extra`. Also SSE framing.

use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::WireError;

/// Whether `text` (JSON, or what is meant to be) may hold what the tree path refuses and the
/// one pass may skip unread in a field it does not know: a number outside the range of an `f64`
/// (`1e999`, or 400 digits; `serde_json::Value` reads every number) or a string escape of a
/// UTF-16 surrogate (`\udc00`, which `Value` refuses when it stands alone). A parser that finds
/// one takes the tree path, so both paths answer alike. Errs on the side of yes (`0e999`, a
/// surrogate pair, which the tree reads as one character): that only costs the slow path.
/// Strings are stepped over with `memchr`, so a body of long messages costs little.
pub(crate) fn may_hold_what_only_the_tree_refuses(text: &str) -> bool {
    /// A number whose integer digits and exponent add up to this may exceed `f64::MAX`
    /// (1.8e308).
    const LARGE: u64 = 300;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // To the string's closing quote: the next quote not escaped.
                i += 1;
                loop {
                    // An escape's backslash may be the text's last byte.
                    let Some(rest) = bytes.get(i..) else { return false };
                    match memchr::memchr2(b'"', b'\\', rest) {
                        Some(at) if bytes[i + at] == b'\\' => {
                            // `\uD800` to `\uDFFF`: half of a UTF-16 surrogate pair.
                            if let Some(&[b'u', b'd' | b'D', half, ..]) = bytes.get(i + at + 1..)
                                && matches!(half, b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
                            {
                                return true;
                            }
                            i += at + 2
                        }
                        Some(at) => {
                            i += at + 1;
                            break;
                        }
                        None => return false,
                    }
                }
            }
            b'0'..=b'9' => {
                let mut magnitude = 0u64;
                while i < bytes.len() && bytes[i] == b'0' {
                    i += 1;
                }
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    magnitude += 1;
                    i += 1;
                }
                if i < bytes.len() && bytes[i] == b'.' {
                    i += 1;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                if i < bytes.len() && matches!(bytes[i], b'e' | b'E') {
                    i += 1;
                    let negative = i < bytes.len() && bytes[i] == b'-';
                    if i < bytes.len() && matches!(bytes[i], b'+' | b'-') {
                        i += 1;
                    }
                    let mut exponent = 0u64;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        exponent = (exponent * 10 + u64::from(bytes[i] - b'0')).min(LARGE);
                        i += 1;
                    }
                    if !negative {
                        magnitude += exponent;
                    }
                }
                if magnitude >= LARGE {
                    return true;
                }
            }
            _ => i += 1,
        }
    }
    false
}

/// Parse the body as a JSON object.
pub(crate) fn parse_object(body: &[u8]) -> Result<Map<String, Value>, WireError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| WireError::MalformedJson { detail: error.to_string() })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(WireError::NotAnObject { found: type_name(&other) }),
    }
}

/// Fail unless `field` is present and not null.
pub(crate) fn require(map: &Map<String, Value>, field: &str) -> Result<(), WireError> {
    match map.get(field) {
        None | Some(Value::Null) => Err(WireError::missing(field)),
        Some(_) => Ok(()),
    }
}

/// Deserialize a whole body into `T`, naming the path of the first bad field.
pub(crate) fn typed<T: DeserializeOwned>(map: Map<String, Value>) -> Result<T, WireError> {
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|error| {
        let path = error.path().to_string();
        let detail = humanize(&error.inner().to_string());
        // "missing field `name`" at `tools[0].function` reads better as the full path.
        if let Some(name) =
            detail.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`'))
        {
            return WireError::missing(join(&path, name));
        }
        if path == "." {
            WireError::invalid("(body)", detail)
        } else {
            WireError::invalid(path, detail)
        }
    })
}

/// serde's words for JSON types, in JSON's words; and never the names of rein's own structs.
fn humanize(detail: &str) -> String {
    let mut out = detail
        .replace("expected f64", "expected a number")
        .replace("expected u32", "expected a non-negative integer")
        .replace("expected u8", "expected an integer from 0 to 255")
        .replace("expected a sequence", "expected an array")
        .replace("invalid type: map", "invalid type: object")
        .replace("invalid type: sequence", "invalid type: array")
        .replace("expected string or map", "expected a string");
    for (prefix, instead) in [("expected struct ", "an object"), ("expected enum ", "a string")] {
        if let Some(start) = out.find(prefix) {
            let rest = &out[start + prefix.len()..];
            let end = rest.find(|c: char| !c.is_alphanumeric() && c != '_').unwrap_or(rest.len());
            out = format!("{}expected {instead}{}", &out[..start], &rest[end..]);
        }
    }
    out
}

/// The fields of the body that rein does not model and that are not null, for
/// `ChatRequest::extra`.
pub(crate) fn extra(map: &Map<String, Value>, known: &[&str]) -> Map<String, Value> {
    map.iter()
        .filter(|(key, value)| !known.contains(&key.as_str()) && !value.is_null())
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// `field` under `path`, with `.` between unless `path` is the root.
pub(crate) fn join(path: &str, field: &str) -> String {
    if path.is_empty() || path == "." { field.to_string() } else { format!("{path}.{field}") }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A field that is either a string or an array of `T` (message content, `stop`, `system`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TextOr<T> {
    Text(String),
    List(Vec<T>),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for TextOr<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextOrVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for TextOrVisitor<T> {
            type Value = TextOr<T>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string or an array")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(TextOr::Text(text.to_owned()))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(TextOr::Text(text))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(TextOr::List(items))
            }
        }

        deserializer.deserialize_any(TextOrVisitor(PhantomData))
    }
}

/// A field that is either a string or an object `T` (OpenAI's `tool_choice`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StringOrObject<T> {
    String(String),
    Object(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for StringOrObject<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StringOrObjectVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for StringOrObjectVisitor<T> {
            type Value = StringOrObject<T>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string or an object")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(StringOrObject::String(text.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(StringOrObject::Object)
            }
        }

        deserializer.deserialize_any(StringOrObjectVisitor(PhantomData))
    }
}

/// One SSE frame carrying a JSON payload, with an optional `event:` line.
pub(crate) fn sse_frame(event: Option<&str>, data: &Value) -> Bytes {
    let mut frame = Vec::with_capacity(256);
    if let Some(event) = event {
        frame.extend_from_slice(b"event: ");
        frame.extend_from_slice(event.as_bytes());
        frame.push(b'\n');
    }
    frame.extend_from_slice(b"data: ");
    // Serializing a JSON tree into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut frame, data);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_out_of_range_is_told_from_one_in_range_and_from_text() {
        let big_integer = format!("{{\"a\":{}}}", "9".repeat(400));
        for (text, expected) in [
            (r#"{"a":1e999}"#, true),
            (r#"{"a":[0.5E+400]}"#, true),
            (big_integer.as_str(), true),
            (r#"{"a":1e300}"#, true), // near the limit: the slow path decides
            (r#"{"a":1e298,"b":-7.25e10}"#, false),
            (r#"{"a":1e-999,"b":0.000001}"#, false),
            (r#"{"a":"1e999"}"#, false),
            (r#"{"a":"say \"1e999\" \\","b":2}"#, false),
            (r#"{"a":"\\"}1e999"#, true),
            (r#"{"a":"unterminated 1e999"#, false),
            (r#"{"a":"ends in an escape\"#, false),
            (r#"{"a":"\"#, false),
            (r#"{"a":"\udE11"}"#, true), // a lone surrogate: the tree refuses it
            (r#"{"a":"\ud83d\ude00"}"#, true), // a pair: the tree decides (and reads it)
            (r#"{"a":"\u00e9 \\ud800 \uE000"}"#, false),
        ] {
            assert_eq!(may_hold_what_only_the_tree_refuses(text), expected, "{text}");
            if expected && serde_json::from_str::<Value>(text).is_ok() {
                // Only the borderline cases may parse: within f64's range, a surrogate pair.
                assert!(text == r#"{"a":1e300}"# || text.contains("ude00"), "{text}");
            }
        }
    }

    #[derive(Debug, Deserialize)]
    struct Body {
        content: TextOr<Part>,
        #[serde(default)]
        choice: Option<StringOrObject<Part>>,
    }

    #[derive(Debug, Deserialize)]
    struct Part {
        text: String,
    }

    fn parse(body: &str) -> Result<Body, WireError> {
        typed(parse_object(body.as_bytes())?)
    }

    #[test]
    fn text_or_list_reads_both_shapes() {
        assert!(
            matches!(parse(r#"{"content":"hi"}"#).unwrap().content, TextOr::Text(t) if t == "hi")
        );
        let body =
            parse(r#"{"content":[{"text":"a"},{"text":"b"}],"choice":{"text":"c"}}"#).unwrap();
        assert!(matches!(body.content, TextOr::List(parts) if parts[1].text == "b"));
        assert!(matches!(body.choice, Some(StringOrObject::Object(part)) if part.text == "c"));
        let body = parse(r#"{"content":"x","choice":"auto"}"#).unwrap();
        assert!(matches!(body.choice, Some(StringOrObject::String(mode)) if mode == "auto"));
    }

    #[test]
    fn errors_carry_the_path_inside_arrays() {
        let error = parse(r#"{"content":[{"text":"a"},{"text":5}]}"#).unwrap_err();
        assert_eq!(error.param(), Some("content[1].text"));
        let error = parse(r#"{"content":[{"text":"a"},{}]}"#).unwrap_err();
        assert_eq!(error, WireError::missing("content[1].text"));
        let error = parse(r#"{"content":"a","choice":{"text":false}}"#).unwrap_err();
        assert_eq!(error.param(), Some("choice.text"));
    }

    #[test]
    fn bodies_must_be_json_objects() {
        assert!(matches!(parse("{nope"), Err(WireError::MalformedJson { .. })));
        assert_eq!(parse("[1]").unwrap_err(), WireError::NotAnObject { found: "an array" });
    }

    #[test]
    fn extra_skips_known_and_null_fields() {
        let map = parse_object(br#"{"a":1,"b":null,"c":"x"}"#).unwrap();
        let extra = extra(&map, &["a"]);
        assert_eq!(Value::Object(extra), serde_json::json!({"c": "x"}));
    }
}
