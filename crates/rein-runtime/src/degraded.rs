//! The degraded mode's rules that act without a model (`[[routes.<name>.degraded_rules]]`), run
//! by the engine whenever a call would get the degraded reply (every tier down or skipped, or
//! the kill switch): the first rule whose pattern matches the customer's message calls its tool
//! through the tool's ladder (so a cached order status still answers while the order service is
//! down) and fills its fixed template from the pattern's named groups and the tool's result; a
//! rule without a tool is a fixed reply ("A person will reply within 2 hours"), and a rule with
//! `handoff = true` also sends the conversation to a person. A rule whose tool refuses, or whose
//! template has a placeholder with no value, gives way to the next. Every acted reply is a
//! `degraded_acted` step of the call's report, so it is counted and logged like any degraded
//! reply.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use futures_util::future::BoxFuture;
use rein_core::handoff::Trigger;
use rein_core::{Acted, CallContext, DegradedActs};
use rein_tools::ToolStatus;
use serde_json::{Map, Value};

use crate::Snapshot;
use crate::config::escalation::DegradedRule;
use crate::escalation::{Escalation, Escalations};

/// The runtime's [`DegradedActs`]: the routes' rules over the current config's tools.
#[derive(Debug, Default)]
pub(crate) struct DegradedRules {
    parts: OnceLock<Parts>,
}

#[derive(Debug)]
struct Parts {
    current: Arc<ArcSwap<Snapshot>>,
    escalations: Escalations,
}

impl DegradedRules {
    /// Connect the rules to the runtime's config and hand-offs (once, when it is built; until
    /// then no rule acts).
    pub(crate) fn connect(&self, current: Arc<ArcSwap<Snapshot>>, escalations: Escalations) {
        let _ = self.parts.set(Parts { current, escalations });
    }
}

impl DegradedActs for DegradedRules {
    fn act<'a>(
        &'a self,
        route: &'a str,
        ctx: &'a CallContext,
        message: &'a str,
    ) -> BoxFuture<'a, Option<Acted>> {
        Box::pin(async move {
            let parts = self.parts.get()?;
            let snapshot = parts.current.load_full();
            let rules = &snapshot.config.routes.get(route)?.escalation.degraded_rules;
            for rule in rules {
                let Some(vars) = matched(rule, message) else { continue };
                let result = match &rule.tool {
                    Some(tool) => {
                        let args = Value::Object(fill_args(&rule.args, &vars));
                        match snapshot.tools.call(&ctx.child(), tool, args).await {
                            Ok(outcome) if outcome.status == ToolStatus::Ok => {
                                outcome.envelope.get("result").cloned()
                            }
                            Ok(outcome) => {
                                tracing::info!(
                                    route,
                                    rule = %rule.name,
                                    status = outcome.status.as_str(),
                                    "degraded rule's tool did not answer: next rule"
                                );
                                continue;
                            }
                            Err(error) => {
                                tracing::warn!(route, rule = %rule.name, "degraded rule's tool failed: {error}");
                                continue;
                            }
                        }
                    }
                    None => None,
                };
                let Some(text) = render(&rule.template, &vars, result.as_ref()) else {
                    tracing::info!(route, rule = %rule.name, "degraded rule's template has a placeholder with no value: next rule");
                    continue;
                };
                if rule.handoff {
                    let mut escalation = Escalation::new(
                        Trigger::Degraded,
                        format!("no model could answer; degraded rule `{}`", rule.name),
                    );
                    escalation.route = Some(route.to_string());
                    escalation.message = Some(message.to_string());
                    escalation.evidence = ctx.evidence.items().to_vec();
                    let request_id = ctx.request_id.as_deref().unwrap_or("-");
                    let handoffs = &snapshot.config.handoffs;
                    if let Err(error) = parts
                        .escalations
                        .hand_off(handoffs, &snapshot.tools, ctx, request_id, escalation)
                        .await
                    {
                        tracing::error!(route, rule = %rule.name, "degraded hand-off not kept: {error}");
                    }
                }
                tracing::warn!(route, rule = %rule.name, handoff = rule.handoff, "degraded mode acted");
                return Some(Acted { text, rule: rule.name.clone(), handoff: rule.handoff });
            }
            None
        })
    }
}

/// The rule's variables for `message` (its named groups and `message`), or `None` when its
/// pattern does not match.
fn matched(rule: &DegradedRule, message: &str) -> Option<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    vars.insert("message".to_string(), message.to_string());
    if let Some(regex) = &rule.regex {
        let captures = regex.captures(message)?;
        for name in regex.capture_names().flatten() {
            if let Some(found) = captures.name(name) {
                vars.insert(name.to_string(), found.as_str().to_string());
            }
        }
    }
    Some(vars)
}

/// The tool's arguments with `{name}` filled in (strings only; other values as written).
fn fill_args(args: &Map<String, Value>, vars: &BTreeMap<String, String>) -> Map<String, Value> {
    args.iter()
        .map(|(key, value)| {
            let value = match value {
                Value::String(text) => {
                    let mut filled = text.clone();
                    for (name, var) in vars {
                        filled = filled.replace(&format!("{{{name}}}"), var);
                    }
                    Value::String(filled)
                }
                other => other.clone(),
            };
            (key.clone(), value)
        })
        .collect()
}

/// The template with `{{name}}` filled from the variables, else from the tool's result by a
/// dotted path (`results.0.url`, the JSON Pointer `/results/0/url`); `None` when a placeholder
/// has no value.
fn render(
    template: &str,
    vars: &BTreeMap<String, String>,
    result: Option<&Value>,
) -> Option<String> {
    rein_core::degraded::fill(template, |name| match vars.get(name) {
        Some(value) => Some(value.clone()),
        None => text_of(result?.pointer(&format!("/{}", name.replace('.', "/")))?),
    })
}

fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn templates_fill_from_groups_and_the_tools_result() {
        let result = json!({"status": "out for delivery", "eta": "6 p.m.", "results": [{"url": "https://help/140"}]});
        let text = render(
            "Order {{order_id}} is {{status}} and should arrive by {{eta}}",
            &vars(&[("order_id", "4417")]),
            Some(&result),
        );
        assert_eq!(
            text.as_deref(),
            Some("Order 4417 is out for delivery and should arrive by 6 p.m.")
        );
        assert_eq!(
            render("{{results.0.url}}", &vars(&[]), Some(&result)).as_deref(),
            Some("https://help/140")
        );
        assert_eq!(
            render("Order {{nope}}", &vars(&[]), Some(&result)),
            None,
            "a gap fails the rule"
        );
        assert_eq!(render("Order {{status}}", &vars(&[]), None), None);
    }

    #[test]
    fn arguments_fill_from_the_message() {
        let args: Map<String, Value> =
            serde_json::from_value(json!({"order_id": "{order_id}", "limit": 1})).unwrap();
        let filled = fill_args(&args, &vars(&[("order_id", "4417")]));
        assert_eq!(Value::Object(filled), json!({"order_id": "4417", "limit": 1}));
    }
}
