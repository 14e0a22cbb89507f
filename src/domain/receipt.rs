//! Canonical JSON and receipts: a SHA-256 digest that binds what was accepted and why.
//!
//! The canonical form sorts object keys recursively and has no whitespace, so the
//! same value always hashes the same whatever order its keys arrived in.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::Fact;

/// Writes `value` in canonical form: keys sorted at every depth, no whitespace.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
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

/// Hex SHA-256 of the canonical form of `value`.
pub fn digest(value: &Value) -> String {
    hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
}

/// Everything a receipt binds together.
#[derive(Debug, Serialize)]
pub struct ReceiptParts<'a> {
    pub input: &'a Value,
    pub result: &'a Value,
    pub facts: &'a [Fact],
    pub evidence: &'a [Value],
    pub gate: &'a str,
    pub gate_version: &'a str,
    pub gate_config: &'a Value,
}

impl ReceiptParts<'_> {
    /// The receipt: `sha256:<hex>` over the canonical encoding of the parts, where
    /// each piece of evidence enters as its own digest.
    pub fn seal(&self) -> String {
        let evidence: Vec<Value> = self
            .evidence
            .iter()
            .map(|e| Value::String(digest(e)))
            .collect();
        let body = serde_json::json!({
            "input": self.input,
            "result": self.result,
            "facts": self.facts,
            "evidence_digests": evidence,
            "gate": self.gate,
            "gate_version": self.gate_version,
            "gate_config": self.gate_config,
        });
        format!("sha256:{}", digest(&body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form_ignores_key_order_and_whitespace() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "é"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"é","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"é","y":[1,2]},"b":1}"#);
        assert_eq!(digest(&a), digest(&b));
    }

    #[test]
    fn a_receipt_changes_when_any_part_changes() {
        let input = json!({"company": "Acme"});
        let result = json!({"email": "info@acme.test"});
        let config = json!({"kind": "schema"});
        let parts = |result: &Value, version: &str| {
            ReceiptParts {
                input: &input,
                result,
                facts: &[],
                evidence: &[],
                gate: "schema",
                gate_version: version,
                gate_config: &config,
            }
            .seal()
        };
        let base = parts(&result, "1");
        assert!(base.starts_with("sha256:") && base.len() == 7 + 64);
        assert_eq!(base, parts(&result, "1"), "sealing is deterministic");
        assert_ne!(base, parts(&json!({"email": "x@acme.test"}), "1"));
        assert_ne!(base, parts(&result, "2"));
    }
}
