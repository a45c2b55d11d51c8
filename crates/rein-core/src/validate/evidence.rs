//! What rein saw earlier in the same run, which the business rules check an answer against:
//! the results of tool calls that went through rein's tool endpoint, and evidence the caller
//! passed in (search results it ran itself, the customer's message). A rule such as "every cited
//! id is among ids returned in this run" is only as good as this record, so it is plain data:
//! serde (de)serializable, so the gateway can take it from callers as JSON, and built by hand in
//! tests.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The source name for evidence the caller passed in, rather than a tool result rein saw.
pub const CALLER_SOURCE: &str = "caller";

/// One thing rein saw in this run: a search result, an order a tool looked up, the customer's
/// message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceItem {
    /// The id an answer may cite (an article id, an order id).
    pub id: String,
    /// The tool that returned it, or [`CALLER_SOURCE`] (or any name the caller chose) for
    /// evidence passed in by the caller.
    pub source: String,
    /// The text a rule may search, such as an article's body.
    #[serde(default)]
    pub text: String,
    /// Structured fields of the result, for rules that compare a field (e.g. `/id`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub fields: Value,
}

impl EvidenceItem {
    /// An item with text and no structured fields.
    pub fn new(source: impl Into<String>, id: impl Into<String>, text: impl Into<String>) -> Self {
        Self { id: id.into(), source: source.into(), text: text.into(), fields: Value::Null }
    }

    /// The same item with these structured fields.
    pub fn with_fields(mut self, fields: Value) -> Self {
        self.fields = fields;
        self
    }
}

/// Everything rein saw in this run, in the order it saw it. Serialized as a plain JSON list of
/// items, so a caller sends `[{"id": "140", "source": "search", "text": "..."}]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Evidence {
    items: Vec<EvidenceItem>,
}

impl Evidence {
    /// No evidence: rules that need some will report what is missing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Evidence made of these items, in this order.
    pub fn from_items(items: Vec<EvidenceItem>) -> Self {
        Self { items }
    }

    /// Record one more item.
    pub fn push(&mut self, item: EvidenceItem) {
        self.items.push(item);
    }

    /// The same evidence with one more item (builder form, for tests and callers).
    pub fn with(mut self, item: EvidenceItem) -> Self {
        self.items.push(item);
        self
    }

    /// Every item, in the order rein saw them.
    pub fn items(&self) -> &[EvidenceItem] {
        &self.items
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Every id seen in this run, from any source, in order (an id seen twice appears twice).
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(|item| item.id.as_str())
    }

    /// Every id the named source returned, in order.
    pub fn ids_from<'a>(&'a self, source: &'a str) -> impl Iterator<Item = &'a str> {
        self.from_tool(source).map(|item| item.id.as_str())
    }

    /// The items the named tool (or caller source) returned, in order.
    pub fn from_tool<'a>(&'a self, tool: &'a str) -> impl Iterator<Item = &'a EvidenceItem> {
        self.items.iter().filter(move |item| item.source == tool)
    }

    /// Whether the named source returned anything in this run.
    pub fn has_source(&self, source: &str) -> bool {
        self.items.iter().any(|item| item.source == source)
    }

    /// The text of the first item with this id, from any source.
    pub fn text_of(&self, id: &str) -> Option<&str> {
        self.items.iter().find(|item| item.id == id).map(|item| item.text.as_str())
    }

    /// Whether any item has this id.
    pub fn contains_id(&self, id: &str) -> bool {
        self.items.iter().any(|item| item.id == id)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    fn sample() -> Evidence {
        Evidence::new()
            .with(EvidenceItem::new("search", "118", "Deliveries run 9 am to 6 pm."))
            .with(EvidenceItem::new("search", "140", "Changes close 48 hours before delivery."))
            .with(
                EvidenceItem::new("look_up_order", "A10234", "Order A10234: 12 red roses")
                    .with_fields(json!({"id": "A10234", "status": "preparing"})),
            )
    }

    #[test]
    fn ids_and_text_are_found_by_id_and_source() {
        let evidence = sample();
        assert_eq!(evidence.ids().collect::<Vec<_>>(), ["118", "140", "A10234"]);
        assert_eq!(evidence.ids_from("search").collect::<Vec<_>>(), ["118", "140"]);
        assert_eq!(evidence.text_of("140"), Some("Changes close 48 hours before delivery."));
        assert_eq!(evidence.text_of("212"), None);
        assert_eq!(evidence.from_tool("look_up_order").count(), 1);
        assert!(evidence.has_source("search"));
        assert!(!evidence.has_source("refund"));
        assert!(evidence.contains_id("A10234"));
        assert_eq!(evidence.len(), 3);
    }

    #[test]
    fn evidence_is_a_plain_json_list() {
        let evidence = sample();
        let text = serde_json::to_string(&evidence).unwrap();
        assert!(text.starts_with("[{\"id\":\"118\""));
        let back: Evidence = serde_json::from_str(&text).unwrap();
        assert_eq!(back, evidence);

        let from_caller: Evidence =
            serde_json::from_value(json!([{"id": "140", "source": "caller"}])).unwrap();
        assert_eq!(from_caller.items()[0].text, "");
        assert_eq!(from_caller.items()[0].fields, Value::Null);
    }

    #[test]
    fn unknown_fields_in_caller_evidence_are_rejected() {
        let typo = serde_json::from_value::<Evidence>(
            json!([{"id": "1", "source": "search", "txt": "typo"}]),
        );
        assert!(typo.is_err());
    }
}
