//! Tool results as evidence: what a tool returned through rein becomes [`EvidenceItem`]s that
//! the business rules of later model calls in the same run check answers against ("every cited
//! article was returned by search in this run"). Only answers the model actually saw count: an
//! `ok` envelope's `result`, whatever rung served it (a cached answer the model was shown is
//! still something it may cite); a queued, refused or busy call returned nothing to cite.

use rein_core::validate::EvidenceItem;
use serde_json::Value;

use crate::config::EvidenceConfig;
use crate::dispatcher::Dispatcher;

/// Most items taken from one result, so a huge result cannot flood a run's record.
const MAX_ITEMS: usize = 256;

/// The evidence in one call's envelope of `tool`, per its `evidence` config.
pub(crate) fn evidence_of(
    dispatcher: &Dispatcher,
    tool: &str,
    envelope: &Value,
) -> Vec<EvidenceItem> {
    let ladder = dispatcher.tool_now(tool);
    let Some(config) = ladder.as_ref().and_then(|tool| tool.evidence.as_ref()) else {
        return Vec::new();
    };
    if envelope.get("status").and_then(Value::as_str) != Some("ok") {
        return Vec::new();
    }
    let Some(result) = envelope.get("result") else { return Vec::new() };
    extract(tool, config, result)
}

fn extract(tool: &str, config: &EvidenceConfig, result: &Value) -> Vec<EvidenceItem> {
    let source = config.source.as_deref().unwrap_or(tool);
    let items: Vec<&Value> = if config.items_at.is_empty() {
        vec![result]
    } else {
        match result.pointer(&config.items_at) {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(item @ Value::Object(_)) => vec![item],
            _ => Vec::new(),
        }
    };
    items
        .into_iter()
        .take(MAX_ITEMS)
        .filter_map(|item| {
            let id = match item.pointer(&config.id_at)? {
                Value::String(id) => id.clone(),
                Value::Number(id) => id.to_string(),
                _ => return None,
            };
            let text = config
                .text_at
                .as_deref()
                .and_then(|at| item.pointer(at))
                .map(|text| match text {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            Some(EvidenceItem::new(source, id, text).with_fields(item.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(items_at: &str) -> EvidenceConfig {
        EvidenceConfig {
            source: Some("search".into()),
            items_at: items_at.into(),
            id_at: "/id".into(),
            text_at: Some("/text".into()),
        }
    }

    #[test]
    fn an_array_of_results_becomes_one_item_each() {
        let result = json!({"results": [
            {"id": 140, "text": "Changes close 48 hours before delivery."},
            {"id": "118", "text": "Refunds take 5 days."},
            {"title": "no id: skipped"},
        ]});
        let items = extract("search_docs", &config("/results"), &result);
        let ids: Vec<_> = items.iter().map(|i| (i.id.as_str(), i.source.as_str())).collect();
        assert_eq!(ids, [("140", "search"), ("118", "search")]);
        assert_eq!(items[0].text, "Changes close 48 hours before delivery.");
        assert_eq!(items[0].fields["id"], 140);
    }

    #[test]
    fn a_single_result_is_one_item_and_the_source_defaults_to_the_tool() {
        let mut config = config("");
        config.source = None;
        let items = extract("look_up_order", &config, &json!({"id": "A-77", "text": "shipped"}));
        assert_eq!(items.len(), 1);
        assert_eq!((items[0].id.as_str(), items[0].source.as_str()), ("A-77", "look_up_order"));
    }

    #[test]
    fn nothing_matches_nothing_is_invented() {
        assert!(extract("t", &config("/results"), &json!({"results": "none"})).is_empty());
        assert!(extract("t", &config("/missing"), &json!({})).is_empty());
    }
}
