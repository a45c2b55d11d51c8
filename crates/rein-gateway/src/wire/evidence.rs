//! The caller's `rein` object in a request body, in either wire format:
//! `{"rein": {"evidence": [{"id": "140", "source": "search", "text": "...", "fields": {...}}],
//! "labels": {"question_type": "delivery"}}}`. OpenAI and Anthropic SDK users send it with
//! `extra_body`. It is rein's own, so both parsers take it out of the body (it never reaches a
//! provider or `ChatRequest::extra`) and read it here: the [`Evidence`] the business rules check
//! answers against, and the call's labels (the same as `x-rein-labels`, for callers whose SDK
//! cannot set headers per call). Every mistake is a 400 naming its place (`rein.evidence[2].id`,
//! `rein.labels.locale`), like any other field.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use rein_core::validate::{CALLER_SOURCE, Evidence, EvidenceItem};

use super::WireError;

/// The top-level field that carries rein's own request options.
pub(crate) const REIN_FIELD: &str = "rein";

/// What the body's `rein` object asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ReinOptions {
    pub evidence: Evidence,
    pub labels: BTreeMap<String, String>,
}

/// [`caller_options`] of a body whose `rein` object was read on its own (the one-pass parse).
pub(crate) fn rein_options(rein: Option<Value>) -> Result<ReinOptions, WireError> {
    match rein {
        None => Ok(ReinOptions::default()),
        Some(rein) => caller_options(&Map::from_iter([(REIN_FIELD.to_owned(), rein)])),
    }
}

/// The evidence and labels in the body's `rein` object; none when the body has no `rein` (or
/// it is null).
pub(crate) fn caller_options(body: &Map<String, Value>) -> Result<ReinOptions, WireError> {
    let rein = match body.get(REIN_FIELD) {
        None | Some(Value::Null) => return Ok(ReinOptions::default()),
        Some(Value::Object(rein)) => rein,
        Some(_) => {
            return Err(WireError::invalid(
                REIN_FIELD,
                "must be an object like {\"evidence\": [...], \"labels\": {...}}",
            ));
        }
    };
    if let Some(unknown) = rein.keys().find(|key| !matches!(key.as_str(), "evidence" | "labels")) {
        return Err(WireError::invalid(
            format!("{REIN_FIELD}.{unknown}"),
            "unknown field; `rein` takes `evidence` and `labels`",
        ));
    }
    let labels = labels(rein.get("labels"))?;
    let evidence = evidence_list(rein.get("evidence"), "rein.evidence")?;
    Ok(ReinOptions { evidence, labels })
}

/// An array of evidence items at `path` (absent or null: none); a mistake names its place
/// under `path` (`{path}[2].id`).
pub(crate) fn evidence_list(items: Option<&Value>, path: &str) -> Result<Evidence, WireError> {
    let items = match items {
        None | Some(Value::Null) => return Ok(Evidence::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(WireError::invalid(
                path,
                "must be an array of evidence items ({\"id\", \"source\", \"text\", \"fields\"})",
            ));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| evidence_item(item, &format!("{path}[{index}]")))
        .collect::<Result<Vec<_>, _>>()
        .map(Evidence::from_items)
}

/// `rein.labels`: an object of label keys to text values, by the rules of `x-rein-labels`.
fn labels(labels: Option<&Value>) -> Result<BTreeMap<String, String>, WireError> {
    let labels = match labels {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(labels)) => labels,
        Some(_) => {
            return Err(WireError::invalid(
                "rein.labels",
                "must be an object of label keys to values, like {\"question_type\": \"delivery\"}",
            ));
        }
    };
    if labels.len() > rein_core::context::MAX_LABELS {
        return Err(WireError::invalid(
            "rein.labels",
            format!("at most {} labels per call", rein_core::context::MAX_LABELS),
        ));
    }
    let mut read = BTreeMap::new();
    for (key, value) in labels {
        let path = format!("rein.labels.{key}");
        let Value::String(value) = value else {
            return Err(WireError::invalid(path, "must be a string"));
        };
        rein_core::context::check_label(key, value).map_err(|why| WireError::invalid(path, why))?;
        read.insert(key.clone(), value.trim().to_string());
    }
    Ok(read)
}

fn evidence_item(item: &Value, path: &str) -> Result<EvidenceItem, WireError> {
    let Value::Object(item) = item else {
        return Err(WireError::invalid(
            path,
            "must be an object with `id` and optionally `source`, `text` and `fields`",
        ));
    };
    if let Some(unknown) =
        item.keys().find(|key| !matches!(key.as_str(), "id" | "source" | "text" | "fields"))
    {
        return Err(WireError::invalid(
            format!("{path}.{unknown}"),
            "unknown field; an evidence item takes `id`, `source`, `text` and `fields`",
        ));
    }
    let id = match item.get("id") {
        None | Some(Value::Null) => return Err(WireError::missing(format!("{path}.id"))),
        // Ids are compared as text; a number is taken as JSON writes it.
        Some(Value::Number(number)) => number.to_string(),
        Some(Value::String(id)) if !id.trim().is_empty() => id.clone(),
        Some(Value::String(_)) => {
            return Err(WireError::invalid(format!("{path}.id"), "must not be empty"));
        }
        Some(_) => {
            return Err(WireError::invalid(format!("{path}.id"), "must be a string or a number"));
        }
    };
    let source = match item.get("source") {
        None | Some(Value::Null) => CALLER_SOURCE.to_string(),
        Some(Value::String(source)) if !source.trim().is_empty() => source.clone(),
        Some(Value::String(_)) => {
            return Err(WireError::invalid(format!("{path}.source"), "must not be empty"));
        }
        Some(_) => {
            return Err(WireError::invalid(
                format!("{path}.source"),
                "must be a string (the tool or source that returned the item)",
            ));
        }
    };
    let text = match item.get("text") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => return Err(WireError::invalid(format!("{path}.text"), "must be a string")),
    };
    let fields = match item.get("fields") {
        None | Some(Value::Null) => Value::Null,
        Some(fields @ Value::Object(_)) => fields.clone(),
        Some(_) => return Err(WireError::invalid(format!("{path}.fields"), "must be an object")),
    };
    Ok(EvidenceItem::new(source, id, text).with_fields(fields))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    fn read(rein: Value) -> Result<Evidence, WireError> {
        let Value::Object(body) = json!({"model": "m", "rein": rein}) else { unreachable!() };
        caller_options(&body).map(|options| options.evidence)
    }

    fn read_labels(labels: Value) -> Result<BTreeMap<String, String>, WireError> {
        let Value::Object(body) = json!({"model": "m", "rein": {"labels": labels}}) else {
            unreachable!()
        };
        caller_options(&body).map(|options| options.labels)
    }

    #[test]
    fn items_are_read_with_defaults() {
        let evidence = read(json!({"evidence": [
            {"id": "140", "source": "search", "text": "Changes close 48 hours before delivery."},
            {"id": 118, "fields": {"status": "preparing"}},
        ]}))
        .unwrap();
        assert_eq!(
            evidence.items(),
            [
                EvidenceItem::new("search", "140", "Changes close 48 hours before delivery."),
                EvidenceItem::new(CALLER_SOURCE, "118", "")
                    .with_fields(json!({"status": "preparing"})),
            ]
        );
        assert!(read(Value::Null).unwrap().is_empty());
        assert!(read(json!({})).unwrap().is_empty());
    }

    #[test]
    fn every_mistake_names_its_place() {
        let cases = [
            (json!("x"), "rein"),
            (json!({"evidense": []}), "rein.evidense"),
            (json!({"evidence": {"id": "1"}}), "rein.evidence"),
            (json!({"evidence": [{"id": "1"}, "2"]}), "rein.evidence[1]"),
            (
                json!({"evidence": [{"id": "1"}, {"id": "2"}, {"text": "no id"}]}),
                "rein.evidence[2].id",
            ),
            (json!({"evidence": [{"id": ""}]}), "rein.evidence[0].id"),
            (json!({"evidence": [{"id": true}]}), "rein.evidence[0].id"),
            (json!({"evidence": [{"id": "1", "source": 5}]}), "rein.evidence[0].source"),
            (json!({"evidence": [{"id": "1", "text": ["a"]}]}), "rein.evidence[0].text"),
            (json!({"evidence": [{"id": "1", "fields": "a"}]}), "rein.evidence[0].fields"),
            (json!({"evidence": [{"id": "1", "txt": "typo"}]}), "rein.evidence[0].txt"),
        ];
        for (rein, param) in cases {
            let error = read(rein.clone()).unwrap_err();
            assert_eq!(error.param(), Some(param), "{rein}: {error}");
            assert!(error.to_string().contains(param), "{error}");
        }
    }

    #[test]
    fn labels_are_read_by_the_header_rules() {
        let labels = read_labels(json!({"question_type": "delivery", "locale": " de "})).unwrap();
        assert_eq!(
            labels,
            BTreeMap::from([
                ("locale".to_string(), "de".to_string()),
                ("question_type".to_string(), "delivery".to_string()),
            ])
        );
        assert!(read_labels(Value::Null).unwrap().is_empty());
        let cases = [
            (json!("question_type=delivery"), "rein.labels"),
            (json!({"Question": "x"}), "rein.labels.Question"),
            (json!({"locale": 7}), "rein.labels.locale"),
            (json!({"locale": ""}), "rein.labels.locale"),
            (json!({"locale": "a=b"}), "rein.labels.locale"),
        ];
        for (labels, param) in cases {
            let error = read_labels(labels.clone()).unwrap_err();
            assert_eq!(error.param(), Some(param), "{labels}: {error}");
        }
        let many: Map<String, Value> =
            (0..=rein_core::context::MAX_LABELS).map(|i| (format!("k{i}"), json!("v"))).collect();
        let error = read_labels(Value::Object(many)).unwrap_err();
        assert_eq!(error.param(), Some("rein.labels"));
    }
}
