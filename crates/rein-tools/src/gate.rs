//! Gates: rules in code that hold a write for a person's approval, evaluated on the arguments
//! the model sent. They fail closed: a missing field, or one whose type cannot be compared with
//! the rule's value (`"amount": "80"` against `> 50`), holds the write. Nothing else in the
//! arguments (`"approved": true`, `"override_gate": true`) is read, so nothing the model says can
//! lift a gate.

use serde_json::Value;

use crate::config::GateRule;
use rein_core::problems::Problems;

/// A comparison operator of a gate rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateOp {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

impl GateOp {
    fn parse(op: &str) -> Option<GateOp> {
        Some(match op {
            ">" => GateOp::Gt,
            ">=" => GateOp::Ge,
            "<" => GateOp::Lt,
            "<=" => GateOp::Le,
            "==" => GateOp::Eq,
            "!=" => GateOp::Ne,
            _ => return None,
        })
    }

    fn is_ordering(self) -> bool {
        matches!(self, GateOp::Gt | GateOp::Ge | GateOp::Lt | GateOp::Le)
    }
}

/// A compiled gate rule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Gate {
    path: Vec<String>,
    op: GateOp,
    value: Value,
    pub reason: String,
}

impl Gate {
    /// Compile `rule` (at config key `key`), recording problems by key.
    pub(crate) fn compile(rule: &GateRule, key: &str, problems: &mut Problems) -> Option<Gate> {
        let mut ok = true;
        let path: Vec<String> = rule.field.split('.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            problems.add(
                format!("{key}.field"),
                format!(
                    "`{}` is not a dot path into the arguments (like `amount` or `refund.amount`)",
                    rule.field
                ),
            );
            ok = false;
        }
        let op = GateOp::parse(&rule.op);
        match op {
            None => {
                problems.add(
                    format!("{key}.op"),
                    format!("`{}` is not an operator: use one of > >= < <= == !=", rule.op),
                );
                ok = false;
            }
            Some(op) if op.is_ordering() && !rule.value.is_number() => {
                problems.add(
                    format!("{key}.value"),
                    format!("operator `{}` compares numbers: the value must be a number", rule.op),
                );
                ok = false;
            }
            Some(_) => {}
        }
        if rule.reason.trim().is_empty() {
            problems.add(format!("{key}.reason"), "must say why a person must approve, in words");
            ok = false;
        }
        let op = op.filter(|_| ok)?;
        Some(Gate { path, op, value: rule.value.clone(), reason: rule.reason.clone() })
    }

    /// Whether this rule holds a write with these arguments.
    pub(crate) fn holds(&self, args: &Value) -> bool {
        let Some(field) = lookup(args, &self.path) else {
            return true; // missing: fail closed
        };
        if let Some(limit) = self.value.as_f64() {
            let Some(actual) = field.as_f64() else {
                return true; // not a number where one is compared: fail closed
            };
            return match self.op {
                GateOp::Gt => actual > limit,
                GateOp::Ge => actual >= limit,
                GateOp::Lt => actual < limit,
                GateOp::Le => actual <= limit,
                GateOp::Eq => actual == limit,
                GateOp::Ne => actual != limit,
            };
        }
        if std::mem::discriminant(field) != std::mem::discriminant(&self.value) {
            return true; // a different type cannot be proven safe: fail closed
        }
        match self.op {
            GateOp::Eq => *field == self.value,
            GateOp::Ne => *field != self.value,
            // Ordering operators need a numeric value; `compile` rejects the rest.
            GateOp::Gt | GateOp::Ge | GateOp::Lt | GateOp::Le => true,
        }
    }
}

/// The first rule that holds a write with these arguments.
pub(crate) fn first_hold<'a>(gates: &'a [Gate], args: &Value) -> Option<&'a Gate> {
    gates.iter().find(|gate| gate.holds(args))
}

fn lookup<'a>(args: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(args, |value, segment| match value {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn gate(field: &str, op: &str, value: Value) -> Gate {
        let rule =
            GateRule { field: field.into(), op: op.into(), value, reason: "a person looks".into() };
        let mut problems = Problems::default();
        let gate = Gate::compile(&rule, "tools.t.gate[0]", &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        gate.unwrap()
    }

    #[test]
    fn numeric_rule_holds_over_the_limit_and_fails_closed_on_anything_odd() {
        let over_50 = gate("amount", ">", json!(50));
        assert!(over_50.holds(&json!({"amount": 80})));
        assert!(!over_50.holds(&json!({"amount": 50})));
        assert!(!over_50.holds(&json!({"amount": 12.5})));
        assert!(over_50.holds(&json!({"amount": "80"})), "a string amount is held");
        assert!(over_50.holds(&json!({"amount": "10"})), "even a small string amount is held");
        assert!(over_50.holds(&json!({})), "a missing amount is held");
        assert!(over_50.holds(&json!({"amount": null})));
        assert!(over_50.holds(&json!({"amount": [10]})));
        assert!(
            over_50.holds(&json!({"amount": 80, "approved": true, "override_gate": true})),
            "nothing else in the arguments lifts the gate"
        );
    }

    #[test]
    fn every_operator_and_nested_paths() {
        let args = json!({"refund": {"amount": 10, "currency": "USD"}, "items": [{"price": 7}]});
        assert!(gate("refund.amount", ">=", json!(10)).holds(&args));
        assert!(!gate("refund.amount", "<", json!(10)).holds(&args));
        assert!(gate("refund.amount", "<=", json!(10)).holds(&args));
        assert!(gate("refund.amount", "==", json!(10.0)).holds(&args));
        assert!(!gate("refund.amount", "!=", json!(10)).holds(&args));
        assert!(gate("items.0.price", ">", json!(5)).holds(&args));
        assert!(gate("items.1.price", ">", json!(5)).holds(&args), "missing index is held");
        assert!(!gate("refund.currency", "!=", json!("USD")).holds(&args));
        assert!(gate("refund.currency", "!=", json!("EUR")).holds(&args));
        assert!(gate("refund.currency", "==", json!(1)).holds(&args), "type mismatch is held");
        assert!(gate("refund.currency", "==", json!(true)).holds(&args), "type mismatch is held");
    }

    #[test]
    fn bad_rules_name_their_keys() {
        let mut problems = Problems::default();
        let rule = |field: &str, op: &str, value: Value| GateRule {
            field: field.into(),
            op: op.into(),
            value,
            reason: "why".into(),
        };
        assert!(Gate::compile(&rule("amount", "=>", json!(1)), "g[0]", &mut problems).is_none());
        assert!(Gate::compile(&rule("amount", ">", json!("50")), "g[1]", &mut problems).is_none());
        assert!(Gate::compile(&rule("a..b", "==", json!(1)), "g[2]", &mut problems).is_none());
        let keys: Vec<_> = problems.keys();
        assert_eq!(keys, ["g[0].op", "g[1].value", "g[2].field"]);
    }
}
