//! Deterministic example values for JSON Schemas, so that JSON answers and tool-call arguments
//! satisfy the simple schemas tests use: required properties with values of the right type,
//! the first `enum` value, `const`, numeric bounds, string lengths and common formats.
//! Anything exotic gets a plausible value rather than an error: this is a simulator, not a
//! validator.

use serde_json::{Map, Value, json};

/// Deeper than this, values become `null` (guards recursive `$ref`s).
const MAX_DEPTH: usize = 12;

/// A value satisfying `schema`. `name` is the property the value is for (used in strings).
pub(crate) fn example(schema: &Value, name: &str) -> Value {
    value_for(schema, schema, name, 0)
}

fn value_for(schema: &Value, root: &Value, name: &str, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let Some(obj) = schema.as_object() else {
        // `true` / missing schema: anything goes.
        return json!(format!("sim-{name}"));
    };
    if let Some(Value::String(reference)) = obj.get("$ref") {
        return match resolve(root, reference) {
            Some(target) => value_for(target, root, name, depth + 1),
            None => Value::Null,
        };
    }
    if let Some(value) = obj.get("const") {
        return value.clone();
    }
    if let Some(Value::Array(options)) = obj.get("enum")
        && let Some(first) = options.first()
    {
        return first.clone();
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(options)) = obj.get(key) {
            let choice = options.iter().find(|o| !is_null_schema(o)).or_else(|| options.first());
            if let Some(choice) = choice {
                return value_for(choice, root, name, depth + 1);
            }
        }
    }
    match schema_type(obj).as_deref() {
        Some("object") => object_value(obj, root, depth),
        Some("array") => array_value(obj, root, name, depth),
        Some("string") => string_value(obj, name),
        Some("integer") => integer_value(obj),
        Some("number") => number_value(obj),
        Some("boolean") => Value::Bool(true),
        Some("null") => Value::Null,
        _ => json!(format!("sim-{name}")),
    }
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

/// The schema's type: the first non-null of a type list, or one implied by its keywords.
fn schema_type(obj: &Map<String, Value>) -> Option<String> {
    match obj.get("type") {
        Some(Value::String(t)) => Some(t.clone()),
        Some(Value::Array(types)) => {
            let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            names.iter().find(|t| **t != "null").or(names.first()).map(|t| (*t).to_owned())
        }
        _ if obj.contains_key("properties") => Some("object".into()),
        _ if obj.contains_key("items") => Some("array".into()),
        _ => None,
    }
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

fn object_value(obj: &Map<String, Value>, root: &Value, depth: usize) -> Value {
    let mut out = Map::new();
    let Some(Value::Object(properties)) = obj.get("properties") else {
        return Value::Object(out);
    };
    let required: Option<Vec<&str>> = match obj.get("required") {
        Some(Value::Array(r)) => Some(r.iter().filter_map(Value::as_str).collect()),
        _ => None,
    };
    for (key, sub) in properties {
        // With a `required` list, only those; without one, every property.
        if required.as_ref().is_some_and(|r| !r.contains(&key.as_str())) {
            continue;
        }
        out.insert(key.clone(), value_for(sub, root, key, depth + 1));
    }
    Value::Object(out)
}

fn array_value(obj: &Map<String, Value>, root: &Value, name: &str, depth: usize) -> Value {
    let min = obj.get("minItems").and_then(Value::as_u64).unwrap_or(1);
    let max = obj.get("maxItems").and_then(Value::as_u64).unwrap_or(u64::MAX);
    let count = min.max(1).min(max).min(16);
    let items = obj.get("items").unwrap_or(&Value::Null);
    Value::Array((0..count).map(|_| value_for(items, root, name, depth + 1)).collect())
}

fn string_value(obj: &Map<String, Value>, name: &str) -> Value {
    let mut text = match obj.get("format").and_then(Value::as_str) {
        Some("date-time") => "2024-01-01T00:00:00Z".to_owned(),
        Some("date") => "2024-01-01".to_owned(),
        Some("time") => "00:00:00Z".to_owned(),
        Some("email") => "sim@example.com".to_owned(),
        Some("uri") | Some("url") => "https://example.com/sim".to_owned(),
        Some("uuid") => "00000000-0000-4000-8000-000000000000".to_owned(),
        _ => format!("sim-{name}"),
    };
    let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    while text.chars().count() < min {
        text.push('x');
    }
    if let Some(max) = obj.get("maxLength").and_then(Value::as_u64) {
        text = text.chars().take(max as usize).collect();
    }
    Value::String(text)
}

fn integer_value(obj: &Map<String, Value>) -> Value {
    let mut value: i64 = 1;
    if let Some(min) = obj.get("minimum").and_then(Value::as_f64) {
        value = min.ceil() as i64;
    }
    if let Some(min) = obj.get("exclusiveMinimum").and_then(Value::as_f64) {
        value = value.max(min.floor() as i64 + 1);
    }
    if let Some(max) = obj.get("maximum").and_then(Value::as_f64) {
        value = value.min(max.floor() as i64);
    }
    if let Some(max) = obj.get("exclusiveMaximum").and_then(Value::as_f64) {
        value = value.min(max.ceil() as i64 - 1);
    }
    json!(value)
}

fn number_value(obj: &Map<String, Value>) -> Value {
    let mut value = 1.5_f64;
    if let Some(min) = obj.get("minimum").and_then(Value::as_f64) {
        value = value.max(min);
    }
    if let Some(min) = obj.get("exclusiveMinimum").and_then(Value::as_f64)
        && value <= min
    {
        value = min + 0.5;
    }
    if let Some(max) = obj.get("maximum").and_then(Value::as_f64) {
        value = value.min(max);
    }
    if let Some(max) = obj.get("exclusiveMaximum").and_then(Value::as_f64)
        && value >= max
    {
        value = max - 0.5;
    }
    json!(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_properties_get_typed_values() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "minimum": 18},
                "score": {"type": "number", "maximum": 1},
                "tier": {"type": "string", "enum": ["gold", "silver"]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "ok": {"type": "boolean"},
                "note": {"type": ["null", "string"]},
                "optional": {"type": "string"}
            },
            "required": ["name", "age", "score", "tier", "tags", "ok", "note"]
        });
        let value = example(&schema, "answer");
        assert_eq!(
            value,
            json!({
                "name": "sim-name", "age": 18, "score": 1.0, "tier": "gold",
                "tags": ["sim-tags", "sim-tags"], "ok": true, "note": "sim-note"
            })
        );
    }

    #[test]
    fn refs_and_nesting_resolve() {
        let schema = json!({
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/item"}},
            "$defs": {"item": {"type": "object", "properties": {"id": {"const": 7}}}}
        });
        assert_eq!(example(&schema, "x"), json!({"item": {"id": 7}}));
    }

    #[test]
    fn recursive_refs_stop() {
        let schema = json!({
            "type": "object",
            "properties": {"next": {"$ref": "#"}},
        });
        // Terminates; the innermost level is null.
        let value = example(&schema, "x");
        assert!(value.get("next").is_some());
    }
}
