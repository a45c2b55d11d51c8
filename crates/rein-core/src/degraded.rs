//! Degraded replies.
//!
//! A degraded reply is decided in advance per route and needs no model: static text, or a
//! template filled from values the caller supplied with the call (a tool result, a link). The
//! kill switch (in [`crate::breaker`]) sends a route, or every route, straight to it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The reply a route gives when no model can.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DegradedReply {
    /// Text with `{{name}}` placeholders, filled from the call's variables; a placeholder with no
    /// value falls back to `fallback_text`.
    pub template: String,
    /// Used when the template cannot be filled.
    pub fallback_text: String,
}

impl Default for DegradedReply {
    fn default() -> Self {
        let text = "Sorry, we can't answer right now. A person will follow up shortly.".to_string();
        Self { template: text.clone(), fallback_text: text }
    }
}

impl DegradedReply {
    pub fn text(text: impl Into<String>) -> Self {
        let text = text.into();
        Self { template: text.clone(), fallback_text: text }
    }

    /// Fill the template, or return the fallback text when a placeholder has no value.
    pub fn render(&self, vars: &BTreeMap<String, String>) -> String {
        let mut out = String::with_capacity(self.template.len());
        let mut rest = self.template.as_str();
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find("}}") else {
                return self.fallback_text.clone();
            };
            match vars.get(after[..end].trim()) {
                Some(value) => out.push_str(value),
                None => return self.fallback_text.clone(),
            }
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_fills_or_falls_back() {
        let reply = DegradedReply {
            template: "Order {{order_id}} is {{ status }}.".into(),
            fallback_text: "A person will reply within 2 hours.".into(),
        };
        let mut vars = BTreeMap::new();
        vars.insert("order_id".to_string(), "4417".to_string());
        assert_eq!(reply.render(&vars), "A person will reply within 2 hours.");
        vars.insert("status".to_string(), "out for delivery".to_string());
        assert_eq!(reply.render(&vars), "Order 4417 is out for delivery.");
    }
}
