//! Degraded replies and the kill switch.
//!
//! A degraded reply is decided in advance per route and needs no model: static text, or a
//! template filled from values the caller supplied with the call (a tool result, a link). The
//! kill switch sends a route, or every route, straight to its degraded reply; it is flipped at
//! runtime and every flip is recorded with its time and reason.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::clock::unix_ms;

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

/// Where the kill switch applies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "scope", content = "route")]
pub enum KillScope {
    Global,
    Route(String),
}

/// One recorded flip of the switch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillFlip {
    pub scope: KillScope,
    pub engaged: bool,
    pub reason: String,
    /// Wall-clock time of the flip, as milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

impl KillFlip {
    /// A flip made now.
    pub fn now(scope: KillScope, engaged: bool, reason: impl Into<String>) -> Self {
        Self { scope, engaged, reason: reason.into(), at_unix_ms: unix_ms() }
    }
}

#[derive(Debug, Default)]
struct KillState {
    engaged: HashMap<KillScope, String>,
    audit: Vec<KillFlip>,
}

/// The kill switch. Cheap to clone; clones share state.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    state: Arc<RwLock<KillState>>,
}

impl KillSwitch {
    /// Engage or release the switch for a scope; takes effect on the next call.
    pub fn set(&self, scope: KillScope, engaged: bool, reason: impl Into<String>) -> KillFlip {
        let flip = KillFlip::now(scope, engaged, reason);
        self.apply(flip.clone());
        flip
    }

    /// Apply a flip made elsewhere (recorded first by the caller, which keeps the audit durable).
    pub fn apply(&self, flip: KillFlip) {
        tracing::warn!(scope = ?flip.scope, engaged = flip.engaged, reason = %flip.reason, "kill switch flipped");
        self.replay(flip);
    }

    /// Bring back recorded flips, oldest first: the switch ends as the last flip per scope left
    /// it, and the audit holds them all with their original times.
    pub fn restore(&self, flips: impl IntoIterator<Item = KillFlip>) {
        for flip in flips {
            self.replay(flip);
        }
    }

    fn replay(&self, flip: KillFlip) {
        let mut state = match self.state.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if flip.engaged {
            state.engaged.insert(flip.scope.clone(), flip.reason.clone());
        } else {
            state.engaged.remove(&flip.scope);
        }
        state.audit.push(flip);
    }

    /// The reason the route is switched off, if it is (global first).
    pub fn engaged_for(&self, route: &str) -> Option<String> {
        let state = match self.state.read() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        state
            .engaged
            .get(&KillScope::Global)
            .or_else(|| state.engaged.get(&KillScope::Route(route.to_string())))
            .cloned()
    }

    /// Every flip so far, oldest first.
    pub fn audit(&self) -> Vec<KillFlip> {
        match self.state.read() {
            Ok(guard) => guard.audit.clone(),
            Err(poisoned) => poisoned.into_inner().audit.clone(),
        }
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

    #[test]
    fn kill_switch_scopes_and_audit() {
        let switch = KillSwitch::default();
        assert_eq!(switch.engaged_for("support"), None);
        switch.set(KillScope::Route("support".into()), true, "bad prompt edit");
        assert_eq!(switch.engaged_for("support").as_deref(), Some("bad prompt edit"));
        assert_eq!(switch.engaged_for("other"), None);
        switch.set(KillScope::Global, true, "provider incident");
        assert!(switch.engaged_for("other").is_some());
        switch.set(KillScope::Global, false, "resolved");
        switch.set(KillScope::Route("support".into()), false, "reverted");
        assert_eq!(switch.engaged_for("support"), None);
        assert_eq!(switch.audit().len(), 4);

        // Restoring the record into a fresh switch gives the same state and audit.
        let restored = KillSwitch::default();
        restored.restore(switch.audit().into_iter().take(2));
        assert_eq!(restored.engaged_for("other").as_deref(), Some("provider incident"));
        assert_eq!(restored.audit(), switch.audit()[..2]);
    }
}
