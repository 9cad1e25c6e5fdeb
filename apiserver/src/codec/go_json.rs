//! JSON in Go's field order: kube-apiserver writes built-in objects with `encoding/json`,
//! which emits struct fields in declaration order (`{"kind":…,"apiVersion":…,"metadata":
//! {"name":…,"namespace":…,"uid":…,…},"spec":…,"status":…}`), map keys sorted.
//!
//! The order comes from the same schema the protobuf decoder uses: the `generated.proto`
//! files declare each message's fields in its Go struct's order (their numbers are not),
//! `json_fields.txt` says which fields are inlined and which JSON names differ. A plan per
//! message (JSON key → rank, and what the value is) is built once; writing an object sorts
//! only the keys it has by rank, so the cost is close to writing a sorted map. Kinds without
//! a message (custom resources: upstream's unstructured maps) keep sorted keys, as upstream.
//! `TypeMeta` (`kind`, `apiVersion`) is first, as the inline first field of every kind.
//! Keys the schema does not know come last, sorted. Strings are escaped as Go escapes them
//! (`<`, `>`, `&`, U+2028, U+2029 as `\uXXXX`).

use std::collections::HashMap;
use std::sync::OnceLock;

use prost_reflect::{Kind, MessageDescriptor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use super::protobuf::{Schema, resolve, with_schema};

/// Message types whose JSON is not an object of their fields.
const OPAQUE: &[&str] = &[
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs",
    "k8s.io.apimachinery.pkg.api.resource.Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
    super::protobuf::EXT_JSON,
];
/// The CRD schema unions (`JSONSchemaPropsOr{Array,Bool,StringArray}`): their JSON is a
/// `JSONSchemaProps` object, an array of them, a boolean or strings, written with the
/// `JSONSchemaProps` plan wherever an object is.
const SCHEMA_UNIONS: &[&str] = &[
    super::protobuf::SCHEMA_OR_ARRAY,
    super::protobuf::SCHEMA_OR_BOOL,
    super::protobuf::SCHEMA_OR_STRINGS,
];
/// An embedded object typed by its own `apiVersion` and `kind`.
const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";

/// What a field's value is.
#[derive(Debug, Clone, Copy)]
enum Child {
    /// Written as it is (scalars, times, quantities, maps of scalars).
    Opaque,
    /// An object of message `plans[i]` (or a list of them).
    Message(usize),
    /// A map whose values are objects of message `plans[i]`.
    MapOf(usize),
    /// An embedded object (`RawExtension`), typed by its own `apiVersion`/`kind`.
    Embedded,
}

/// What Go writes for a field the object lacks: a non-pointer struct or scalar, or a
/// slice or map without `omitempty`, is never left out.
#[derive(Debug, Clone)]
enum Zero {
    /// The struct's zero value: an object with its own always-written fields.
    Struct(usize),
    /// A fixed JSON value (`null` for times, nil slices and maps; `""`, `0`, `false`).
    Value(Value),
}

/// One message's JSON keys: rank and value kind.
#[derive(Debug, Default)]
struct Plan {
    fields: HashMap<String, (u32, Child)>,
    /// Fields Go always writes, with their zero values, in rank order.
    always: Vec<(u32, String, Zero)>,
}

struct Plans {
    plans: Vec<Plan>,
    by_name: HashMap<String, usize>,
}

/// The plans, built on first use from the schema, which is not kept for them: the plans
/// hold what the JSON order needs (kinds resolve by message name, [`resolve`]).
fn plans() -> Option<&'static Plans> {
    static PLANS: OnceLock<Option<Plans>> = OnceLock::new();
    PLANS.get_or_init(|| with_schema(build_all).ok()).as_ref()
}

fn build_all(schema: &Schema) -> Plans {
    let names: Vec<String> = schema
        .pool
        .all_messages()
        .map(|m| m.full_name().to_owned())
        .collect();
    let by_name: HashMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), i))
        .collect();
    let mut plans: Vec<Plan> = names
        .iter()
        .map(|n| match schema.pool.get_message_by_name(n) {
            Some(m) => build(schema, &by_name, &m),
            None => Plan::default(),
        })
        .collect();
    let mut by_name = by_name;
    add_table_plans(&mut plans, &mut by_name);
    Plans { plans, by_name }
}

fn child_of(by_name: &HashMap<String, usize>, m: &MessageDescriptor) -> Child {
    let name = m.full_name();
    if name == RAW_EXTENSION {
        Child::Embedded
    } else if SCHEMA_UNIONS.contains(&name) {
        by_name
            .get(super::protobuf::SCHEMA_PROPS)
            .map_or(Child::Opaque, |i| Child::Message(*i))
    } else if OPAQUE.contains(&name) || name.ends_with(".ExtraValue") {
        Child::Opaque
    } else {
        by_name
            .get(name)
            .map_or(Child::Opaque, |i| Child::Message(*i))
    }
}

fn build(schema: &Schema, by_name: &HashMap<String, usize>, m: &MessageDescriptor) -> Plan {
    let mut plan = Plan::default();
    let mut rank = 0u32;
    // `TypeMeta` is inlined first in every kind; structs with their own `kind` or
    // `apiVersion` field (owner references, managed fields entries) keep theirs in place.
    if m.get_field_by_name("kind").is_none() && m.get_field_by_name("apiVersion").is_none() {
        plan.fields.insert("kind".into(), (0, Child::Opaque));
        plan.fields.insert("apiVersion".into(), (1, Child::Opaque));
        rank = 2;
    }
    add_fields(schema, by_name, m, &mut plan, &mut rank, 0);
    plan
}

/// Adds `m`'s fields in declaration order, an inlined struct's fields at its place.
fn add_fields(
    schema: &Schema,
    by_name: &HashMap<String, usize>,
    m: &MessageDescriptor,
    plan: &mut Plan,
    rank: &mut u32,
    depth: usize,
) {
    let rules = schema.rules.get(m.full_name());
    // The descriptor's own field list is in declaration order (`fields()` is by number).
    let declared: Vec<u32> = m
        .descriptor_proto()
        .field
        .iter()
        .filter_map(|f| f.number.and_then(|n| u32::try_from(n).ok()))
        .collect();
    for fd in declared.into_iter().filter_map(|n| m.get_field(n)) {
        let rule = rules.and_then(|r| r.get(&fd.number()));
        if let (Some(r), Kind::Message(inner)) = (rule, fd.kind())
            && r.inline
            && depth < 4
        {
            add_fields(schema, by_name, &inner, plan, rank, depth + 1);
            continue;
        }
        let name = rule
            .and_then(|r| r.json_name.clone())
            .unwrap_or_else(|| fd.name().to_owned());
        if let Some(zero) = zero_of(rule, &fd, by_name) {
            plan.always.push((*rank, name.clone(), zero));
        }
        let child = match fd.kind() {
            Kind::Message(entry) if fd.is_map() => match entry.map_entry_value_field().kind() {
                Kind::Message(v) => match child_of(by_name, &v) {
                    Child::Message(i) => Child::MapOf(i),
                    _ => Child::Opaque,
                },
                _ => Child::Opaque,
            },
            Kind::Message(inner) => child_of(by_name, &inner),
            _ => Child::Opaque,
        };
        plan.fields.entry(name).or_insert((*rank, child));
        *rank += 1;
    }
}

/// What Go writes for field `fd` when the object lacks it; `None`: nothing (a pointer, or
/// an `omitempty` scalar, slice or map). Opaque structs other than times (quantities,
/// int-or-strings, raw objects) are left to the object: their zero forms vary.
fn zero_of(
    rule: Option<&super::protobuf::FieldRule>,
    fd: &prost_reflect::FieldDescriptor,
    by_name: &HashMap<String, usize>,
) -> Option<Zero> {
    if rule.is_some_and(|r| r.pointer) {
        return None;
    }
    let keep_zero = rule.is_some_and(|r| r.keep_zero);
    if fd.is_list() || fd.is_map() {
        return keep_zero.then_some(Zero::Value(Value::Null));
    }
    match fd.kind() {
        Kind::Message(m) => match m.full_name() {
            TIME | MICRO_TIME => Some(Zero::Value(Value::Null)),
            name => match child_of(by_name, &m) {
                Child::Message(i) if !OPAQUE.contains(&name) && !SCHEMA_UNIONS.contains(&name) => {
                    Some(Zero::Struct(i))
                }
                _ => None,
            },
        },
        _ if !keep_zero => None,
        Kind::String | Kind::Bytes => Some(Zero::Value(Value::String(String::new()))),
        Kind::Bool => Some(Zero::Value(Value::Bool(false))),
        Kind::Enum(_) => None,
        _ => Some(Zero::Value(Value::from(0))),
    }
}

const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";

/// Key of the `meta.k8s.io` Table's plan (the type has no protobuf message).
const TABLE: &str = "meta.k8s.io/Table";

/// Plans for `meta.k8s.io/v1` `Table` and its parts, which are not in the protobuf schema,
/// in their Go structs' order: `Table{TypeMeta, metadata, columnDefinitions, rows}`,
/// `TableColumnDefinition{name, type, format, description, priority}`,
/// `TableRow{cells, conditions, object}`, `TableRowCondition{type, status, reason, message}`.
/// `columnDefinitions` and `rows` have no `omitempty` (written `null` when absent).
fn add_table_plans(plans: &mut Vec<Plan>, by_name: &mut HashMap<String, usize>) {
    let ranked = |names: &[&str], child: &dyn Fn(&str) -> Child| Plan {
        fields: names
            .iter()
            .zip(0u32..)
            .map(|(n, i)| ((*n).to_owned(), (i, child(n))))
            .collect(),
        always: Vec::new(),
    };
    let opaque = |_: &str| Child::Opaque;
    let column = plans.len();
    plans.push(ranked(
        &["name", "type", "format", "description", "priority"],
        &opaque,
    ));
    let condition = plans.len();
    plans.push(ranked(&["type", "status", "reason", "message"], &opaque));
    let row = plans.len();
    plans.push(ranked(&["cells", "conditions", "object"], &|n| match n {
        "conditions" => Child::Message(condition),
        "object" => Child::Embedded,
        _ => Child::Opaque,
    }));
    let list_meta = by_name
        .get("k8s.io.apimachinery.pkg.apis.meta.v1.ListMeta")
        .copied();
    let mut table = ranked(
        &[
            "kind",
            "apiVersion",
            "metadata",
            "columnDefinitions",
            "rows",
        ],
        &|n| match (n, list_meta) {
            ("metadata", Some(i)) => Child::Message(i),
            ("columnDefinitions", _) => Child::Message(column),
            ("rows", _) => Child::Message(row),
            _ => Child::Opaque,
        },
    );
    table.always = vec![
        (3, "columnDefinitions".to_owned(), Zero::Value(Value::Null)),
        (4, "rows".to_owned(), Zero::Value(Value::Null)),
    ];
    if let Some(i) = list_meta {
        table
            .always
            .insert(0, (2, "metadata".to_owned(), Zero::Struct(i)));
    }
    by_name.insert(TABLE.to_owned(), plans.len());
    plans.push(table);
}

/// The plan of the kind `obj` names, if the schema has it. The core group's discovery
/// documents (`APIVersions`, `APIResourceList` of `/api`, `/api/v1`) are written without an
/// `apiVersion`, as upstream writes them (their plan is meta/v1's).
fn plan_for(plans: &Plans, obj: &Map<String, Value>) -> Option<usize> {
    let kind = obj.get("kind")?.as_str()?;
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if kind == "Table" && api_version.starts_with("meta.k8s.io/") {
        return plans.by_name.get(TABLE).copied();
    }
    resolve(api_version, kind, |name| plans.by_name.get(name).copied())
}

/// A value written with its plan.
struct Go<'a> {
    value: &'a Value,
    child: Child,
    plans: &'a Plans,
}

impl Serialize for Go<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self.value, self.child) {
            (Value::Array(items), Child::Message(_) | Child::Embedded) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Go {
                        value: item,
                        child: self.child,
                        plans: self.plans,
                    })?;
                }
                seq.end()
            }
            (Value::Object(m), Child::Message(i)) => ordered(s, m, i, self.plans),
            (Value::Object(m), Child::Embedded) => match plan_for(self.plans, m) {
                Some(i) => ordered(s, m, i, self.plans),
                None => m.serialize(s),
            },
            (Value::Object(m), Child::MapOf(i)) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(
                        k,
                        &Go {
                            value: v,
                            child: Child::Message(i),
                            plans: self.plans,
                        },
                    )?;
                }
                map.end()
            }
            (v, _) => v.serialize(s),
        }
    }
}

fn ordered<S: Serializer>(
    s: S,
    m: &Map<String, Value>,
    plan: usize,
    plans: &Plans,
) -> Result<S::Ok, S::Error> {
    let fields = &plans.plans[plan].fields;
    // The zero value of a struct the object lacks, written with the struct's plan.
    let empty = Value::Object(Map::new());
    let mut keys: Vec<(u32, &String, &Value, Child)> = m
        .iter()
        .map(|(k, v)| {
            let (rank, child) = fields.get(k).copied().unwrap_or((u32::MAX, Child::Opaque));
            (rank, k, v, child)
        })
        .collect();
    for (rank, name, zero) in &plans.plans[plan].always {
        if m.contains_key(name) {
            continue;
        }
        match zero {
            Zero::Struct(i) => keys.push((*rank, name, &empty, Child::Message(*i))),
            Zero::Value(v) => keys.push((*rank, name, v, Child::Opaque)),
        }
    }
    // Stable: unknown keys keep the map's sorted order, after the known ones.
    keys.sort_by_key(|k| k.0);
    let mut map = s.serialize_map(Some(keys.len()))?;
    for (_, k, v, child) in keys {
        map.serialize_entry(
            k,
            &Go {
                value: v,
                child,
                plans,
            },
        )?;
    }
    map.end()
}

/// Go's string escaping on top of serde_json's: `encoding/json` also escapes `<`, `>`, `&`
/// (`\u003c`, `\u003e`, `\u0026`) and U+2028/U+2029, which only occur inside strings.
fn write_go_fragment<W: ?Sized + std::io::Write>(w: &mut W, fragment: &str) -> std::io::Result<()> {
    let bytes = fragment.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let escape: Option<(&[u8], usize)> = match bytes[i] {
            b'<' => Some((b"\\u003c", 1)),
            b'>' => Some((b"\\u003e", 1)),
            b'&' => Some((b"\\u0026", 1)),
            0xE2 if bytes.get(i + 1) == Some(&0x80) && bytes.get(i + 2) == Some(&0xA8) => {
                Some((b"\\u2028", 3))
            }
            0xE2 if bytes.get(i + 1) == Some(&0x80) && bytes.get(i + 2) == Some(&0xA9) => {
                Some((b"\\u2029", 3))
            }
            _ => None,
        };
        match escape {
            Some((with, len)) => {
                w.write_all(&bytes[start..i])?;
                w.write_all(with)?;
                i += len;
                start = i;
            }
            None => i += 1,
        }
    }
    w.write_all(&bytes[start..])
}

/// serde_json's compact output with Go's string escaping.
struct GoCompact;

impl serde_json::ser::Formatter for GoCompact {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        write_go_fragment(w, fragment)
    }
}

/// `MarshalIndent(v, "", "  ")`: serde_json's pretty output with Go's string escaping.
struct GoPretty(serde_json::ser::PrettyFormatter<'static>);

impl serde_json::ser::Formatter for GoPretty {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        write_go_fragment(w, fragment)
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// Writes `value` (an object of a built-in kind, a list, a Status, a Table…) as Go writes
/// its type; anything else with sorted keys.
pub fn to_writer(out: &mut Vec<u8>, value: &Value) {
    let mut ser = serde_json::Serializer::with_formatter(&mut *out, GoCompact);
    let written = match plans() {
        Some(plans) => Go {
            value,
            child: Child::Embedded,
            plans,
        }
        .serialize(&mut ser),
        None => value.serialize(&mut ser),
    };
    if let Err(e) = written {
        tracing::warn!(err = %e, "encoding a response");
    }
}

/// [`to_writer`] indented by two spaces, as Go's `json.MarshalIndent(v, "", "  ")`.
pub fn to_vec_pretty(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    let formatter = GoPretty(serde_json::ser::PrettyFormatter::with_indent(b"  "));
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    let written = match plans() {
        Some(plans) => Go {
            value,
            child: Child::Embedded,
            plans,
        }
        .serialize(&mut ser),
        None => value.serialize(&mut ser),
    };
    if let Err(e) = written {
        tracing::warn!(err = %e, "encoding a response");
    }
    out
}

/// [`to_writer`] into a new buffer.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    to_writer(&mut out, value);
    out
}

/// [`to_vec`] of an object.
pub fn object_to_vec(obj: &Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoCompact);
    let written = match plans() {
        Some(plans) => GoObject { obj, plans }.serialize(&mut ser),
        None => obj.serialize(&mut ser),
    };
    if let Err(e) = written {
        tracing::warn!(err = %e, "encoding an object");
    }
    out
}

struct GoObject<'a> {
    obj: &'a Map<String, Value>,
    plans: &'a Plans,
}

impl Serialize for GoObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match plan_for(self.plans, self.obj) {
            Some(i) => ordered(s, self.obj, i, self.plans),
            None => self.obj.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn go(v: &Value) -> String {
        String::from_utf8(to_vec(v)).unwrap()
    }

    #[test]
    fn built_in_kinds_in_struct_order() {
        let svc = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"uid": "u", "resourceVersion": "5", "namespace": "default", "name": "web",
                "creationTimestamp": "2024-01-01T00:00:00Z", "labels": {"b": "2", "a": "1"}},
            "spec": {"type": "ClusterIP", "ports": [{"targetPort": 80, "protocol": "TCP", "port": 80, "name": "http"}],
                "clusterIP": "10.0.0.1", "selector": {"app": "web"}},
            "status": {"loadBalancer": {}}});
        assert_eq!(
            go(&svc),
            r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"web","namespace":"default","uid":"u","resourceVersion":"5","creationTimestamp":"2024-01-01T00:00:00Z","labels":{"a":"1","b":"2"}},"spec":{"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":80}],"selector":{"app":"web"},"clusterIP":"10.0.0.1","type":"ClusterIP"},"status":{"loadBalancer":{}}}"#
        );
    }

    #[test]
    fn status_lists_and_unknown_kinds() {
        let status = json!({"apiVersion": "v1", "kind": "Status", "code": 409,
            "details": {"kind": "services", "name": "web"}, "message": "m",
            "metadata": {}, "reason": "AlreadyExists", "status": "Failure"});
        assert_eq!(
            go(&status),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"AlreadyExists","details":{"name":"web","kind":"services"},"code":409}"#
        );
        let list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
            "items": [{"data": {"k": "v"}, "metadata": {"name": "c"}}],
            "metadata": {"resourceVersion": "3"}});
        assert_eq!(
            go(&list),
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"3"},"items":[{"metadata":{"name":"c","creationTimestamp":null},"data":{"k":"v"}}]}"#
        );
        let custom =
            json!({"kind": "Widget", "apiVersion": "example.com/v1", "spec": {"b": 1, "a": 2}});
        assert_eq!(
            go(&custom),
            r#"{"apiVersion":"example.com/v1","kind":"Widget","spec":{"a":2,"b":1}}"#
        );
    }

    #[test]
    fn nested_api_versions_stay_in_place() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
            "managedFields": [{"time": "t", "operation": "Update", "manager": "kubectl",
                "fieldsV1": {"f:data": {}}, "fieldsType": "FieldsV1", "apiVersion": "v1"}],
            "ownerReferences": [{"uid": "u", "name": "o", "kind": "Pod", "apiVersion": "v1"}]}});
        assert_eq!(
            go(&cm),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","creationTimestamp":null,"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"o","uid":"u"}],"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"v1","time":"t","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]}}"#
        );
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"html": "<a href=\"x\">&</a>", "sep": "a\u{2028}b\u{2029}", "tab": "\t"}});
        assert_eq!(
            go(&cm),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","creationTimestamp":null},"data":{"html":"\u003ca href=\"x\"\u003e\u0026\u003c/a\u003e","sep":"a\u2028b\u2029","tab":"\t"}}"#
        );
        let pretty = String::from_utf8(to_vec_pretty(&json!({"a": "<"}))).unwrap();
        assert_eq!(pretty, "{\n  \"a\": \"\\u003c\"\n}");
    }

    #[test]
    fn pod_templates_and_embedded_objects() {
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [{"image": "nginx", "name": "c",
                "resources": {"limits": {"cpu": "1"}}}]}, "metadata": {"labels": {"a": "b"}}},
                "selector": {"matchLabels": {"a": "b"}}, "replicas": 1}});
        assert_eq!(
            go(&deploy),
            r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d","creationTimestamp":null},"spec":{"replicas":1,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"creationTimestamp":null,"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"nginx","resources":{"limits":{"cpu":"1"}}}]}},"strategy":{}},"status":{}}"#
        );
    }

    #[test]
    fn fields_go_always_writes_are_written() {
        // Non-pointer structs (status, loadBalancer), a slice without omitempty (rules),
        // scalars without omitempty (the PDB's counts), times (null); pointers stay out.
        let svc = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "creationTimestamp": "t"}, "spec": {"clusterIP": "None"}});
        assert_eq!(
            go(&svc),
            r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"s","creationTimestamp":"t"},"spec":{"clusterIP":"None"},"status":{"loadBalancer":{}}}"#
        );
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "r", "creationTimestamp": "t"}});
        assert_eq!(
            go(&role),
            r#"{"kind":"Role","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"r","creationTimestamp":"t"},"rules":null}"#
        );
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "p", "creationTimestamp": "t"}, "spec": {"minAvailable": 1}});
        assert_eq!(
            go(&pdb),
            r#"{"kind":"PodDisruptionBudget","apiVersion":"policy/v1","metadata":{"name":"p","creationTimestamp":"t"},"spec":{"minAvailable":1},"status":{"disruptionsAllowed":0,"currentHealthy":0,"desiredHealthy":0,"expectedPods":0}}"#
        );
    }

    #[test]
    fn tables_and_api_versions_in_struct_order() {
        let table = json!({"apiVersion": "meta.k8s.io/v1", "kind": "Table",
            "metadata": {"resourceVersion": "5"},
            "columnDefinitions": [{"type": "string", "priority": 0, "name": "Name",
                "format": "name", "description": "d"}],
            "rows": [{"object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"uid": "u", "name": "c"}}, "cells": ["c", 1]}]});
        assert_eq!(
            go(&table),
            r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"5"},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"d","priority":0}],"rows":[{"cells":["c",1],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"c","uid":"u","creationTimestamp":null}}}]}"#
        );
        let versions = json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"serverAddress": "a:1", "clientCIDR": "0.0.0.0/0"}]});
        assert_eq!(
            go(&versions),
            r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"a:1"}]}"#
        );
    }
}
