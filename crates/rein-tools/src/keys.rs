//! Idempotency keys and argument digests. A write's key is the caller's, or derived from the
//! conversation (`"{tool}:{conversation_id}"`, so one conversation performs the write at most
//! once), or minted (UUID v4) before the first attempt; every attempt and replay carries the same
//! key. The digest of the canonical arguments (object keys sorted at every depth, whatever
//! serde_json's map order is) lets the store tell a repeat from a key reused for other arguments.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The arguments as compact JSON with object keys sorted at every depth.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// SHA-256 of the canonical arguments, in lowercase hex: the cache key of reads and the
/// `args_hash` an idempotency record remembers.
pub fn args_hash(args: &Value) -> String {
    hex(&Sha256::digest(canonical_json(args).as_bytes()))
}

/// The prefix of the keys minted for `caller` (an opaque identity: eight bytes of its digest,
/// so the key says nothing about who called), by which a re-issue finds its first call's key.
pub(crate) fn caller_prefix(caller: &str) -> String {
    format!("r-{}-", hex(&Sha256::digest(caller.as_bytes())[..8]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The key of a `key_from = "conversation"` write.
pub fn conversation_key(tool: &str, conversation_id: &str) -> String {
    format!("{tool}:{conversation_id}")
}

/// A fresh key for a write whose caller sent none.
pub(crate) fn mint_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn canonical_form_ignores_key_order_at_every_depth() {
        let a: Value =
            serde_json::from_str(r#"{"b":1,"a":{"y":[1,{"d":2,"c":3}],"x":"s"}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a":{"x":"s","y":[1,{"c":3,"d":2}]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"s","y":[1,{"c":3,"d":2}]},"b":1}"#);
        assert_eq!(args_hash(&a), args_hash(&b));
        assert_ne!(args_hash(&a), args_hash(&json!({"b": 2})));
        assert_eq!(args_hash(&a).len(), 64);
    }

    #[test]
    fn minted_keys_are_uuid_v4_and_distinct() {
        let (a, b) = (mint_key(), mint_key());
        assert_ne!(a, b);
        assert_eq!(uuid::Uuid::parse_str(&a).unwrap().get_version_num(), 4);
        assert_eq!(conversation_key("hand_off", "c-1"), "hand_off:c-1");
    }
}
