//! Degraded replies.
//!
//! A degraded reply is decided in advance per route and needs no model: static text, or a
//! template filled from values the caller supplied with the call (a tool result, a link), and
//! optionally a JSON object of the shape a structured caller expects. The kill switch (in
//! [`crate::breaker`]) sends a route, or every route, straight to it. A route may deliver it as
//! an error instead of an answer ([`Delivery::Error`]), so an SDK caller can tell an outage from
//! an answer; a route with no degraded reply at all never makes one up: its call fails, saying
//! why.
//!
//! A degraded mode can also act ([`DegradedActs`]): rules that rein runs itself, without a
//! model, through its tool ladders (an order number → the order's status in a fixed template; a
//! policy question → the top help-center article's link; anything else → "a person will reply"
//! and a hand-off). The runtime implements them over its tool dispatcher; the engine asks them
//! first whenever a call would get the degraded reply.

use std::collections::BTreeMap;
use std::fmt;

use futures_util::future::BoxFuture;

use crate::context::CallContext;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a degraded mode's rule did: the reply, which rule, and whether it sent the
/// conversation to a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acted {
    pub text: String,
    pub rule: String,
    pub handoff: bool,
}

/// A degraded mode that acts without a model. `act` gets the route, the call's context and the
/// customer's message (the last user message), and answers `None` when no rule applies (the
/// route's degraded reply then goes out as before).
pub trait DegradedActs: Send + Sync + fmt::Debug {
    fn act<'a>(
        &'a self,
        route: &'a str,
        ctx: &'a CallContext,
        message: &'a str,
    ) -> BoxFuture<'a, Option<Acted>>;
}

/// How a degraded reply reaches the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// As the answer (customer-facing routes: the person reads the decided text).
    #[default]
    Reply,
    /// As an error in the caller's wire format carrying the decided text (SDK and agent callers,
    /// whose fallbacks trigger on errors).
    Error,
}

/// The reply a route gives when no model can.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DegradedReply {
    /// Text with `{{name}}` placeholders, filled from the call's variables; a placeholder with no
    /// value falls back to `fallback_text`.
    pub template: String,
    /// Used when the template cannot be filled.
    pub fallback_text: String,
    /// What a caller that asked for JSON gets instead of the text; without it, such a caller
    /// gets the error (prose is the wrong shape for a parser).
    pub json: Option<Value>,
    pub deliver: Delivery,
}

impl Default for DegradedReply {
    fn default() -> Self {
        Self::text("Sorry, this can't be answered right now.")
    }
}

impl DegradedReply {
    pub fn text(text: impl Into<String>) -> Self {
        let text = text.into();
        Self { template: text.clone(), fallback_text: text, json: None, deliver: Delivery::Reply }
    }

    /// Fill the template, or return the fallback text when a placeholder has no value.
    pub fn render(&self, vars: &BTreeMap<String, String>) -> String {
        fill(&self.template, |name| vars.get(name).cloned())
            .unwrap_or_else(|| self.fallback_text.clone())
    }
}

/// `template` with every `{{name}}` replaced by `lookup(name)` (the name trimmed); `None` when a
/// placeholder has no value or is not closed.
pub fn fill(template: &str, lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}")?;
        out.push_str(&lookup(after[..end].trim())?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_fills_or_falls_back() {
        let reply = DegradedReply {
            template: "Order {{order_id}} is {{ status }}.".into(),
            fallback_text: "A person will reply within 2 hours.".into(),
            ..DegradedReply::default()
        };
        let mut vars = BTreeMap::new();
        vars.insert("order_id".to_string(), "4417".to_string());
        assert_eq!(reply.render(&vars), "A person will reply within 2 hours.");
        vars.insert("status".to_string(), "out for delivery".to_string());
        assert_eq!(reply.render(&vars), "Order 4417 is out for delivery.");
    }
}
