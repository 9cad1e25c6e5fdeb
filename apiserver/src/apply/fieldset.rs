//! Field sets: the `FieldsV1` form of `metadata.managedFields` (structured-merge-diff's
//! `fieldpath.Set`), with its path elements `f:<field>`, `k:<key fields as JSON>`,
//! `v:<value as JSON>` and `i:<index>`, and `.` marking a node that is itself a member.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A set of field paths, as a tree keyed by encoded path elements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Set {
    /// The path ending here is in the set.
    pub member: bool,
    /// Longer paths, by their next element (`f:spec`, `k:{"name":"c"}`, …).
    pub children: BTreeMap<String, Set>,
}

/// The path element of a field or map key.
pub fn field(name: &str) -> String {
    format!("f:{name}")
}

/// The path element of an associative list item with these key fields (sorted by name).
pub fn key(fields: &Map<String, Value>) -> String {
    let sorted: BTreeMap<&String, &Value> = fields.iter().collect();
    format!("k:{}", serde_json::to_string(&sorted).unwrap_or_default())
}

/// The path element of a set item.
pub fn value(v: &Value) -> String {
    format!("v:{}", serde_json::to_string(v).unwrap_or_default())
}

impl Set {
    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(Set::is_empty)
    }

    /// Inserts the path `path` (encoded elements).
    pub fn insert(&mut self, path: &[String]) {
        match path.split_first() {
            None => self.member = true,
            Some((first, rest)) => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((first, rest)) => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Every member path, in order.
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (k, c) in &self.children {
            prefix.push(k.clone());
            c.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The members of both sets.
    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.member |= other.member;
        for (k, c) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(c),
                None => c.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    /// The members of `self` not in `other`.
    pub fn difference(&self, other: &Set) -> Set {
        let mut out = Set {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            let rest = match other.children.get(k) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(k.clone(), rest);
            }
        }
        out
    }

    /// The members in both sets.
    pub fn intersection(&self, other: &Set) -> Set {
        let mut out = Set {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            if let Some(o) = other.children.get(k) {
                let both = c.intersection(o);
                if !both.is_empty() {
                    out.children.insert(k.clone(), both);
                }
            }
        }
        out
    }

    /// The `FieldsV1` JSON of the set.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &self.children {
            if !c.is_empty() {
                m.insert(k.clone(), c.to_json());
            }
        }
        Value::Object(m)
    }

    /// Parses `FieldsV1` JSON; `None` if it is not a tree of objects with valid elements.
    pub fn from_json(v: &Value) -> Option<Set> {
        let Value::Object(m) = v else {
            return None;
        };
        let mut out = Set {
            member: m.is_empty(),
            children: BTreeMap::new(),
        };
        for (k, c) in m {
            if k == "." {
                out.member = true;
                continue;
            }
            let valid = match k.split_once(':') {
                Some(("f", _)) => true,
                Some(("i", n)) => n.parse::<i64>().is_ok(),
                Some(("k" | "v", json)) => serde_json::from_str::<Value>(json).is_ok(),
                _ => false,
            };
            if !valid {
                return None;
            }
            out.children.insert(k.clone(), Set::from_json(c)?);
        }
        Some(out)
    }
}

/// A path as upstream prints it in conflicts: `.spec.replicas`,
/// `.spec.containers[name="c"].image`, `.spec.finalizers[="x"]`, `.spec.args[0]`.
pub fn display(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        match element.split_once(':') {
            Some(("f", name)) => {
                out.push('.');
                out.push_str(name);
            }
            Some(("k", json)) => {
                let fields: Map<String, Value> = serde_json::from_str(json).unwrap_or_default();
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", serde_json::to_string(v).unwrap_or_default()))
                    .collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Some(("v", json)) => out.push_str(&format!("[={json}]")),
            Some(("i", n)) => out.push_str(&format!("[{n}]")),
            _ => out.push_str(element),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fields_v1_round_trips() {
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}
                }}},
                "f:finalizers": {"v:\"x\"": {}},
                "f:args": {"i:0": {}}
            }
        });
        let set = Set::from_json(&v).unwrap();
        assert!(set.has(&["f:spec".into(), "f:replicas".into()]));
        assert!(set.has(&["f:metadata".into(), "f:labels".into()]));
        assert!(!set.has(&["f:spec".into()]));
        assert_eq!(set.to_json(), v);
        assert_eq!(set.paths().len(), 8);
    }

    #[test]
    fn bad_elements_are_rejected() {
        assert!(Set::from_json(&json!({"x:y": {}})).is_none());
        assert!(Set::from_json(&json!({"k:{bad": {}})).is_none());
        assert!(Set::from_json(&json!({"f:a": 1})).is_none());
    }

    #[test]
    fn keys_are_sorted_json_and_paths_display_as_upstream() {
        let mut k = Map::new();
        k.insert("protocol".into(), json!("TCP"));
        k.insert("containerPort".into(), json!(80));
        assert_eq!(key(&k), r#"k:{"containerPort":80,"protocol":"TCP"}"#);
        let path = vec![
            field("spec"),
            field("containers"),
            key(&json!({"name": "c"}).as_object().unwrap().clone()),
            field("image"),
        ];
        assert_eq!(display(&path), r#".spec.containers[name="c"].image"#);
        assert_eq!(
            display(&[field("spec"), field("replicas")]),
            ".spec.replicas"
        );
    }

    #[test]
    fn set_algebra() {
        let mut a = Set::default();
        a.insert(&[field("a"), field("b")]);
        a.insert(&[field("a"), field("c")]);
        let mut b = Set::default();
        b.insert(&[field("a"), field("c")]);
        b.insert(&[field("d")]);
        assert_eq!(
            a.intersection(&b).paths(),
            vec![vec![field("a"), field("c")]]
        );
        assert_eq!(a.difference(&b).paths(), vec![vec![field("a"), field("b")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
    }
}
