//! JSON documents whose object keys come out in a chosen order: Go's encoder writes struct
//! fields in declaration order, and documents the server builds itself (discovery) are
//! written that way with this type instead of a sorted `serde_json::Map`.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// A JSON value whose objects keep their keys in the order given.
#[derive(Debug, Clone)]
pub enum Ordered {
    /// Any JSON value, written as serde_json writes it.
    Value(Value),
    /// An object, keys in this order.
    Object(Vec<(&'static str, Ordered)>),
    /// An array.
    Array(Vec<Ordered>),
}

impl Ordered {
    /// An object from `(key, value)` pairs, in order.
    pub fn object(fields: Vec<(&'static str, Ordered)>) -> Ordered {
        Ordered::Object(fields)
    }

    /// Appends `key: value` to an object (no-op on other values).
    pub fn push(&mut self, key: &'static str, value: Ordered) {
        if let Ordered::Object(fields) = self {
            fields.push((key, value));
        }
    }

    /// The compact JSON bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl<T: Into<Value>> From<T> for Ordered {
    fn from(v: T) -> Ordered {
        Ordered::Value(v.into())
    }
}

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Ordered::Value(v) => v.serialize(s),
            Ordered::Object(fields) => {
                let mut m = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            Ordered::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order() {
        let mut o = Ordered::object(vec![("kind", "X".into()), ("apiVersion", "v1".into())]);
        o.push(
            "items",
            Ordered::Array(vec![Ordered::object(vec![
                ("z", 1.into()),
                ("a", 2.into()),
            ])]),
        );
        assert_eq!(
            String::from_utf8(o.to_vec()).unwrap(),
            r#"{"kind":"X","apiVersion":"v1","items":[{"z":1,"a":2}]}"#
        );
    }
}
