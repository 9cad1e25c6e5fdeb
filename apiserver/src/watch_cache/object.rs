//! One object as the watch cache holds it: the stored JSON bytes, shared with the store (not
//! a copy, not a parsed tree), where its `metadata.resourceVersion` is spliced in when it is
//! written out, and the few fields selectors read.

use std::io::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The fields of an object that selectors and namespace scoping read. Kept small, as every
/// cached object has one: the namespace is shared between consecutive objects of one
/// namespace, labels and other selectable fields take one pointer when there are none.
#[derive(Debug, Default, Clone)]
pub struct Meta {
    /// `metadata.namespace` ("" for cluster-scoped objects).
    pub namespace: Arc<str>,
    /// `metadata.name`.
    pub name: Box<str>,
    /// Labels and selectable fields, when there are any.
    extra: Option<Box<Extra>>,
}

/// The rarer parts of [`Meta`].
#[derive(Debug, Default, Clone)]
struct Extra {
    /// `metadata.labels`.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// The resource's other selectable fields (dotted path, value as field selectors see it).
    fields: Box<[(&'static str, Box<str>)]>,
}

impl Meta {
    fn labels(&self) -> &[(Box<str>, Box<str>)] {
        self.extra.as_deref().map_or(&[], |e| &e.labels)
    }

    fn fields(&self) -> &[(&'static str, Box<str>)] {
        self.extra.as_deref().map_or(&[], |e| &e.fields)
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels()
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    /// The value of selectable field `field` (`None` when the resource has no such field).
    pub fn field(&self, field: &str) -> Option<&str> {
        match field {
            "metadata.name" => Some(&self.name),
            "metadata.namespace" => Some(&self.namespace),
            _ => self
                .fields()
                .iter()
                .find(|(f, _)| *f == field)
                .map(|(_, v)| &**v),
        }
    }
}

/// A stored object at one revision.
#[derive(Debug, Clone)]
pub struct CachedObject {
    /// The stored JSON, without `metadata.resourceVersion`.
    raw: Bytes,
    /// Where `metadata.resourceVersion` goes in `raw` (Go's field order).
    splice: Option<Slot>,
    /// The revision stamped as `metadata.resourceVersion`.
    revision: i64,
    /// When `raw` opens with `"kind":…,"apiVersion":…,` (Go's order for built-in types):
    /// the index just after that pair, where a list item's JSON resumes.
    type_meta_end: Option<u32>,
    meta: Meta,
}

/// `namespace` as an `Arc`, the one of the previous call on this thread when it is the same
/// (objects arrive namespace by namespace: one allocation serves them all).
fn shared_namespace(namespace: &str) -> Arc<str> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<Arc<str>>> = const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some(ns) if **ns == *namespace => Arc::clone(ns),
            _ => {
                let ns: Arc<str> = Arc::from(namespace);
                *last = Some(Arc::clone(&ns));
                ns
            }
        }
    })
}

/// What decoding needs of the stored JSON.
#[derive(Deserialize)]
struct Head {
    metadata: Option<MetaIn>,
}

#[derive(Deserialize)]
struct MetaIn {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<serde::de::IgnoredAny>,
}

/// Decodes only the subtrees at dotted `paths` of the JSON object in `raw` (what the
/// selectable fields read), skipping the rest unparsed into values: a pod's spec, status
/// and managed fields are not built into a tree on every write just to read
/// `spec.nodeName` and `status.phase`.
fn pruned(raw: &[u8], paths: &[&str]) -> Option<Map<String, Value>> {
    use serde::de::DeserializeSeed as _;
    let mut de = serde_json::Deserializer::from_slice(raw);
    match Prune(paths.to_vec()).deserialize(&mut de).ok()? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

/// The paths still wanted below the current value ("" = all of it).
struct Prune<'a>(Vec<&'a str>);

impl<'de> serde::de::DeserializeSeed<'de> for Prune<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.0.iter().any(|p| p.is_empty()) {
            return Value::deserialize(d);
        }
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Prune<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let below: Vec<&str> = self
                .0
                .iter()
                .filter_map(|p| match p.strip_prefix(key.as_ref()) {
                    Some("") => Some(""),
                    Some(rest) => rest.strip_prefix('.'),
                    None => None,
                })
                .collect();
            if below.is_empty() {
                map.next_value::<serde::de::IgnoredAny>()?;
            } else {
                let v = map.next_value_seed(Prune(below))?;
                out.insert(key.into_owned(), v);
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // Field selectors do not index into lists.
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Value::Null)
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

impl CachedObject {
    /// Reads a stored object written at `revision`; `fields` are the resource's selectable
    /// fields beyond name and namespace. `None` when the bytes are not a JSON object.
    pub fn decode(raw: Bytes, revision: i64, fields: &[&'static str]) -> Option<CachedObject> {
        let head: Head = serde_json::from_slice(&raw).ok()?;
        let mut raw = raw;
        let mut splice = metadata_slot(&raw);
        let has_rv = head
            .metadata
            .as_ref()
            .is_some_and(|m| m.resource_version.is_some());
        if (head.metadata.is_some() && splice.is_none()) || has_rv {
            // Unusual bytes (written by another client): normalise them once.
            let mut obj: Map<String, Value> = serde_json::from_slice(&raw).ok()?;
            if let Some(Value::Object(m)) = obj.get_mut("metadata") {
                m.remove("resourceVersion");
            }
            raw = Bytes::from(serde_json::to_vec(&obj).ok()?);
            splice = metadata_slot(&raw);
        }
        let fields: Box<[(&'static str, Box<str>)]> = if fields.is_empty() {
            Box::default()
        } else {
            let obj = pruned(&raw, fields)?;
            fields
                .iter()
                .map(|f| (*f, crate::selector::field_value(&obj, f).into_boxed_str()))
                .collect()
        };
        let meta = head.metadata.map_or_else(Meta::default, |m| {
            let labels: Box<[(Box<str>, Box<str>)]> = m
                .labels
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect();
            Meta {
                namespace: shared_namespace(&m.namespace),
                name: m.name.into_boxed_str(),
                extra: (!labels.is_empty() || !fields.is_empty())
                    .then(|| Box::new(Extra { labels, fields })),
            }
        });
        Some(CachedObject {
            type_meta_end: type_meta_end(&raw),
            raw,
            splice,
            revision,
            meta,
        })
    }

    /// The same object stamped with another revision (a deletion's).
    pub fn at_revision(&self, revision: i64) -> CachedObject {
        CachedObject {
            revision,
            ..self.clone()
        }
    }

    /// The revision stamped as `metadata.resourceVersion`.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The fields selectors read.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// An upper bound of the JSON's length.
    pub fn json_len(&self) -> usize {
        self.raw.len() + 48
    }

    /// Bytes this object holds besides its stored JSON (which is shared with the store):
    /// the struct, and the decoded metadata selectors read.
    pub fn own_bytes(&self) -> usize {
        let m = &self.meta;
        // The Arc's counts, the name, and the extra parts (the namespace is shared).
        16 + std::mem::size_of::<CachedObject>()
            + m.name.len()
            + m.extra.as_ref().map_or(0, |_| std::mem::size_of::<Extra>())
            + m.labels()
                .iter()
                .map(|(k, v)| 2 * std::mem::size_of::<Box<str>>() + k.len() + v.len())
                .sum::<usize>()
            + m.fields()
                .iter()
                .map(|(_, v)| std::mem::size_of::<(&str, Box<str>)>() + v.len())
                .sum::<usize>()
    }

    /// Appends the object's JSON, `metadata.resourceVersion` included.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self.splice {
            Some(slot) => splice(out, &self.raw, slot, self.revision),
            None => out.extend_from_slice(&self.raw),
        }
    }

    /// Appends the object's JSON as an item of a built-in type's list: without `kind` and
    /// `apiVersion`, as kube-apiserver writes typed lists' items (the list carries them).
    pub fn write_item_json(&self, out: &mut Vec<u8>) {
        let (Some(end), Some(slot)) = (self.type_meta_end, self.splice) else {
            return self.write_json(out);
        };
        if slot.at < end || end as usize > self.raw.len() {
            return self.write_json(out);
        }
        let end_index = end as usize;
        out.push(b'{');
        let body = &self.raw[end_index..];
        splice(
            out,
            body,
            Slot {
                at: slot.at - end,
                ..slot
            },
            self.revision,
        );
    }

    /// The object's JSON, `metadata.resourceVersion` included.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.json_len());
        self.write_json(&mut out);
        out
    }

    /// The object decoded (for Tables and other consumers of the parsed form).
    pub fn to_map(&self) -> Option<Map<String, Value>> {
        serde_json::from_slice(&self.to_json()).ok()
    }
}

/// `json` (an object as serde_json writes it, without `metadata.resourceVersion`) with
/// `metadata.resourceVersion` set to `revision`, by splicing the field in place rather than
/// parsing and writing the object again; `None` when `json` has no `metadata` object.
pub fn stamp_revision(mut json: Vec<u8>, revision: i64) -> Option<Vec<u8>> {
    let slot = metadata_slot(&json)?;
    let mut field = Vec::with_capacity(48);
    if slot.comma_before {
        field.push(b',');
    }
    let _ = write!(field, "\"resourceVersion\":\"{revision}\"");
    if slot.comma_after {
        field.push(b',');
    }
    let at = slot.index().min(json.len());
    json.splice(at..at, field);
    Some(json)
}

/// Where `"resourceVersion":"…"` is inserted into a stored object's metadata: at `at`, with
/// a comma before it (it follows other fields) or after it (it opens a non-empty object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    at: u32,
    comma_before: bool,
    comma_after: bool,
}

impl Slot {
    /// `at` as an index.
    fn index(self) -> usize {
        self.at as usize
    }
}

/// The fields of `ObjectMeta` that come before `resourceVersion` in Go's struct order.
const BEFORE_RV: [&[u8]; 5] = [b"name", b"generateName", b"namespace", b"selfLink", b"uid"];

/// Appends `json` with `"resourceVersion":"<revision>"` inserted at `slot`.
fn splice(out: &mut Vec<u8>, json: &[u8], slot: Slot, revision: i64) {
    let (head, tail) = json.split_at(slot.index().min(json.len()));
    out.extend_from_slice(head);
    if slot.comma_before {
        out.push(b',');
    }
    let _ = write!(out, "\"resourceVersion\":\"{revision}\"");
    if slot.comma_after {
        out.push(b',');
    }
    out.extend_from_slice(tail);
}

/// Where the top-level `metadata` object of `json` takes its `resourceVersion`: after the
/// fields Go writes before it (name, generateName, namespace, selfLink, uid), before the
/// rest — as kube-apiserver writes `ObjectMeta`. `None` when there is no such object (or the
/// JSON is not as serde_json writes it).
fn metadata_slot(json: &[u8]) -> Option<Slot> {
    let brace = metadata_brace(json)?;
    let mut slot = Slot {
        at: u32::try_from(brace + 1).ok()?,
        comma_before: false,
        comma_after: false,
    };
    let mut i = skip_ws(json, brace + 1);
    if json.get(i) == Some(&b'}') {
        return Some(slot);
    }
    slot.comma_after = true;
    loop {
        if json.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = skip_string(json, i)?;
        let key = json.get(i + 1..key_end - 1)?;
        if !BEFORE_RV.contains(&key) {
            return Some(slot);
        }
        i = skip_ws(json, key_end);
        if json.get(i) != Some(&b':') {
            return None;
        }
        let end = skip_value(json, skip_ws(json, i + 1))?;
        slot = Slot {
            at: u32::try_from(end).ok()?,
            comma_before: true,
            comma_after: false,
        };
        i = skip_ws(json, end);
        match json.get(i)? {
            b',' => i = skip_ws(json, i + 1),
            b'}' => return Some(slot),
            _ => return None,
        }
    }
}

/// When `json` opens with `{"kind":…,"apiVersion":…,` followed by more fields, the index
/// just after that comma.
fn type_meta_end(json: &[u8]) -> Option<u32> {
    let mut i = 0;
    for want in [b"kind".as_slice(), b"apiVersion".as_slice()] {
        i = skip_ws(json, i);
        match json.get(i)? {
            b'{' if want == b"kind" => i = skip_ws(json, i + 1),
            b',' if want == b"apiVersion" => i = skip_ws(json, i + 1),
            _ => return None,
        }
        if json.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = skip_string(json, i)?;
        if json.get(i + 1..key_end - 1)? != want {
            return None;
        }
        i = skip_ws(json, key_end);
        if json.get(i) != Some(&b':') {
            return None;
        }
        i = skip_value(json, skip_ws(json, i + 1))?;
    }
    i = skip_ws(json, i);
    if json.get(i) != Some(&b',') {
        return None;
    }
    u32::try_from(i + 1).ok()
}

/// Index of the `{` opening the top-level `metadata` object of `json`; `None` when there is
/// no such object (or the JSON is not as serde_json writes it).
fn metadata_brace(json: &[u8]) -> Option<usize> {
    let mut i = skip_ws(json, 0);
    if json.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(json, i);
        if json.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = skip_string(json, i)?;
        let key = json.get(i + 1..key_end - 1)?;
        i = skip_ws(json, key_end);
        if json.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(json, i + 1);
        if key == b"metadata" {
            if json.get(i) != Some(&b'{') {
                return None;
            }
            return Some(i);
        }
        i = skip_ws(json, skip_value(json, i)?);
        if json.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The index after the string starting at `i` (which holds `"`).
fn skip_string(json: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match json.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The index after the value starting at `i`.
fn skip_value(json: &[u8], i: usize) -> Option<usize> {
    match json.get(i)? {
        b'"' => skip_string(json, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match json.get(j)? {
                    b'"' => {
                        j = skip_string(json, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while json
                .get(j)
                .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
            {
                j += 1;
            }
            Some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cached(v: &Value, rev: i64) -> CachedObject {
        CachedObject::decode(Bytes::from(v.to_string()), rev, &["spec.nodeName"]).unwrap()
    }

    #[test]
    fn a_stored_object_is_stamped_with_its_revision() {
        let v = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"resourceVersion": "not this one"}},
            "spec": {"nodeName": "n1"}});
        let stamped = stamp_revision(v.to_string().into_bytes(), 42).unwrap();
        let mut want = v;
        want["metadata"]["resourceVersion"] = json!("42");
        assert_eq!(serde_json::from_slice::<Value>(&stamped).unwrap(), want);
        let empty = stamp_revision(br#"{"metadata":{}}"#.to_vec(), 7).unwrap();
        assert_eq!(empty, br#"{"metadata":{"resourceVersion":"7"}}"#);
        assert!(stamp_revision(br#"{"kind":"X"}"#.to_vec(), 7).is_none());
    }

    #[test]
    fn pruned_keeps_only_the_selected_paths() {
        let v = json!({"spec": {"nodeName": "n1", "containers": [{"name": "c"}],
            "hostNetwork": true, "priority": 7}, "status": {"phase": "Running",
            "conditions": [{"type": "Ready"}]}, "metadata": {"name": "p",
            "managedFields": [{"manager": "m"}]}, "spex": {"nodeName": "no"}});
        let got = pruned(
            v.to_string().as_bytes(),
            &[
                "spec.nodeName",
                "spec.hostNetwork",
                "spec.priority",
                "status.phase",
                "spec.x.y",
            ],
        )
        .unwrap();
        assert_eq!(
            Value::Object(got),
            json!({"spec": {"nodeName": "n1", "hostNetwork": true, "priority": 7},
                "status": {"phase": "Running"}})
        );
        assert!(pruned(b"[1]", &["a"]).is_none());
        assert!(pruned(b"{", &["a"]).is_none());
    }

    #[test]
    fn the_resource_version_is_spliced_into_metadata() {
        let v = json!({"apiVersion": "v1", "data": {"metadata": "x", "k": "{\"}"},
            "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns",
            "labels": {"app": "web"}}});
        let o = cached(&v, 42);
        let back: Value = serde_json::from_slice(&o.to_json()).unwrap();
        let mut want = v;
        want["metadata"]["resourceVersion"] = json!("42");
        assert_eq!(back, want);
        assert_eq!(o.meta().name.as_ref(), "a");
        assert_eq!(o.meta().label("app"), Some("web"));
        assert_eq!(o.meta().field("metadata.namespace"), Some("ns"));
        assert_eq!(o.meta().field("spec.nodeName"), Some(""));
        let deleted = o.at_revision(50);
        assert_eq!(
            deleted.to_map().unwrap()["metadata"]["resourceVersion"],
            "50"
        );
    }

    #[test]
    fn empty_missing_and_stale_metadata() {
        let o = cached(&json!({"kind": "X", "metadata": {}}), 7);
        assert_eq!(
            o.to_map().unwrap()["metadata"],
            json!({"resourceVersion": "7"})
        );
        let o = cached(&json!({"kind": "X"}), 7);
        assert_eq!(
            o.to_map().unwrap(),
            *json!({"kind": "X"}).as_object().unwrap()
        );
        let o = cached(
            &json!({"metadata": {"name": "n", "resourceVersion": "3"}}),
            9,
        );
        assert_eq!(o.to_map().unwrap()["metadata"]["resourceVersion"], "9");
        assert!(CachedObject::decode(Bytes::from_static(b"[1]"), 1, &[]).is_none());
    }

    #[test]
    fn scanner_skips_nested_values_and_escapes() {
        let raw = br#" { "a" : [1, {"b": "]\"}"}], "n": -1.5e3 , "metadata" : { } }"#;
        let at = metadata_brace(raw).unwrap();
        assert_eq!(raw[at], b'{');
        assert_eq!(
            metadata_slot(raw),
            Some(Slot {
                at: u32::try_from(at + 1).unwrap(),
                comma_before: false,
                comma_after: false
            })
        );
        assert!(metadata_brace(br#"{"a": 1}"#).is_none());
        assert!(metadata_brace(br#"{"a": "unterminated"#).is_none());
    }

    /// A built-in type's list item drops the leading `kind` and `apiVersion`.
    #[test]
    fn list_items_leave_out_their_type() {
        let o = CachedObject::decode(
            Bytes::from_static(
                br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","uid":"u","labels":{"x":"y"}},"data":{"k":"v"}}"#,
            ),
            5,
            &[],
        )
        .unwrap();
        let mut item = Vec::new();
        o.write_item_json(&mut item);
        assert_eq!(
            String::from_utf8(item).unwrap(),
            r#"{"metadata":{"name":"a","uid":"u","resourceVersion":"5","labels":{"x":"y"}},"data":{"k":"v"}}"#
        );
        // Other shapes are written whole.
        let other = CachedObject::decode(
            Bytes::from_static(br#"{"apiVersion":"x/v1","kind":"W","metadata":{}}"#),
            6,
            &[],
        )
        .unwrap();
        let mut item = Vec::new();
        other.write_item_json(&mut item);
        assert_eq!(item, other.to_json());
    }

    /// kube-apiserver writes `ObjectMeta` in Go's field order: `resourceVersion` after
    /// `name`, `generateName`, `namespace`, `selfLink` and `uid`, before the rest.
    #[test]
    fn the_resource_version_takes_its_place_in_go_order() {
        let stamp = |raw: &str| {
            String::from_utf8(stamp_revision(raw.as_bytes().to_vec(), 7).unwrap()).unwrap()
        };
        assert_eq!(
            stamp(
                r#"{"kind":"Pod","metadata":{"name":"p","namespace":"d","uid":"u","creationTimestamp":"t"},"spec":{}}"#
            ),
            r#"{"kind":"Pod","metadata":{"name":"p","namespace":"d","uid":"u","resourceVersion":"7","creationTimestamp":"t"},"spec":{}}"#
        );
        assert_eq!(
            stamp(r#"{"metadata":{"name":"p","uid":"u"}}"#),
            r#"{"metadata":{"name":"p","uid":"u","resourceVersion":"7"}}"#
        );
        assert_eq!(
            stamp(r#"{"metadata":{"labels":{"a":"b"}}}"#),
            r#"{"metadata":{"resourceVersion":"7","labels":{"a":"b"}}}"#
        );
        assert_eq!(
            stamp(r#"{"metadata":{}}"#),
            r#"{"metadata":{"resourceVersion":"7"}}"#
        );
        let o = CachedObject::decode(
            Bytes::from_static(br#"{"metadata":{"name":"n","generateName":"g","generation":2}}"#),
            9,
            &[],
        )
        .unwrap();
        assert_eq!(
            o.to_json(),
            br#"{"metadata":{"name":"n","generateName":"g","resourceVersion":"9","generation":2}}"#
        );
    }
}
