//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) request bodies → JSON objects.
//!
//! Wire format (upstream `runtime/serializer/protobuf`): the 4 magic bytes `k8s\0`, then a
//! `runtime.Unknown` message `{1: typeMeta {1: apiVersion, 2: kind}, 2: raw, 3:
//! contentEncoding, 4: contentType}` whose `raw` is the kind's own message from the upstream
//! `generated.proto`. The message is decoded dynamically against the compiled schema and
//! walked field by field into the JSON the same object has in Go's JSON encoding:
//!
//! - field names are the proto names, which go-to-protobuf takes from the JSON tags (a few
//!   exceptions are renamed from `json_fields.txt`);
//! - Go writes every non-pointer scalar, zero or not, so a zero scalar on the wire is dropped
//!   unless Go's JSON keeps it (a pointer such as `replicas: 0`, or a field without
//!   `omitempty`), as listed in `json_fields.txt`; messages, list items and map values are
//!   always kept, empty lists and maps never reach the wire;
//! - embedded (`json:",inline"`) structs such as `Volume.volumeSource` are merged into their
//!   parent;
//! - the types with their own JSON form are converted by message name: `Time` and
//!   `MicroTime` (RFC 3339, `null` when zero), `Duration` (Go's duration string), `Quantity`,
//!   `IntOrString`, `RawExtension` and `FieldsV1` (embedded JSON), and the list wrappers
//!   `ExtraValue` and `Verbs` (arrays); `bytes` become base64 strings.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage as _, Value as PValue,
};
use serde_json::{Map, Number, Value};

/// The magic prefix of every Kubernetes protobuf body.
pub(super) const MAGIC: &[u8; 4] = b"k8s\0";

/// The descriptor set `build.rs` compiles from `apiserver/proto/`.
const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/k8s_descriptors.bin"));

/// Per-field JSON facts from the Go types (see `apiserver/proto/json_fields.py`).
const JSON_FIELDS: &str = include_str!("../../proto/json_fields.txt");

/// How deep `RawExtension`s holding protobuf objects may nest.
const MAX_NESTING: usize = 8;

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
pub(super) const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
pub(super) const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
pub(super) const DURATION: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Duration";
pub(super) const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";
pub(super) const VERBS: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs";
pub(super) const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
pub(super) const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
pub(super) const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
pub(super) const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
/// apiextensions' `JSON`: any JSON value, its bytes in field 1 (`default`, `enum`, `example`).
pub(super) const EXT_JSON: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON";
/// apiextensions' `JSONSchemaProps`, the message the three `…Or…` unions hold.
pub(super) const SCHEMA_PROPS: &str =
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps";
/// `JSONSchemaPropsOrArray{1: schema, 2: jSONSchemas}`: JSON an object or an array of them.
pub(super) const SCHEMA_OR_ARRAY: &str =
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray";
/// `JSONSchemaPropsOrBool{1: allows, 2: schema}`: JSON a boolean or an object.
pub(super) const SCHEMA_OR_BOOL: &str =
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool";
/// `JSONSchemaPropsOrStringArray{1: schema, 2: property}`: JSON an object or strings.
pub(super) const SCHEMA_OR_STRINGS: &str =
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray";

/// The legacy discovery documents (meta/v1), which `/api` and `/api/v1` write without an
/// `apiVersion`.
pub(super) const DISCOVERY_KINDS: &[&str] = &["APIVersions", "APIGroup", "APIResourceList"];

/// What Go's JSON encoding does with one proto field, beyond the defaults.
#[derive(Debug, Default)]
pub(super) struct FieldRule {
    /// A zero scalar on the wire is kept (a pointer field, or one without `omitempty`).
    pub(super) keep_zero: bool,
    /// An embedded struct whose fields are inlined into the parent.
    pub(super) inline: bool,
    /// The JSON name, where it differs from the proto name.
    pub(super) json_name: Option<String>,
    /// A Go pointer field: Go's protobuf encoding writes it only when set.
    pub(super) pointer: bool,
}

/// The compiled schema plus the JSON facts the `.proto` files lack.
pub(super) struct Schema {
    pub(super) pool: DescriptorPool,
    /// Message full name → field number → rule (from `json_fields.txt`).
    pub(super) rules: HashMap<String, HashMap<u32, FieldRule>>,
}

impl Schema {
    /// Decodes the descriptor set and parses `json_fields.txt` (≈ 4 MB of descriptors in
    /// memory). [`schema`] keeps one for the protobuf codec; the Go JSON field order builds
    /// its compact tables from a transient one ([`with_schema`]).
    pub(super) fn load() -> Result<Self, String> {
        let pool = DescriptorPool::decode(DESCRIPTORS)
            .map_err(|e| format!("loading the Kubernetes protobuf schema: {e}"))?;
        let mut rules: HashMap<String, HashMap<u32, FieldRule>> = HashMap::new();
        for line in JSON_FIELDS.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(message), Some(number), Some(flag)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("json_fields.txt: malformed line {line:?}"));
            };
            let number: u32 = number
                .parse()
                .map_err(|_| format!("json_fields.txt: bad field number in {line:?}"))?;
            let rule = rules
                .entry(message.to_owned())
                .or_default()
                .entry(number)
                .or_default();
            match flag {
                "keep-zero" => rule.keep_zero = true,
                "inline" => rule.inline = true,
                "pointer" => rule.pointer = true,
                _ => match flag.strip_prefix("json=") {
                    Some(name) => rule.json_name = Some(name.to_owned()),
                    None => return Err(format!("json_fields.txt: unknown flag in {line:?}")),
                },
            }
        }
        Ok(Schema { pool, rules })
    }

    /// The message for `apiVersion`/`kind` ([`resolve`]).
    pub(super) fn message_for(&self, api_version: &str, kind: &str) -> Option<MessageDescriptor> {
        resolve(api_version, kind, |name| {
            self.pool.get_message_by_name(name)
        })
    }
}

/// Looks up the message of `apiVersion`/`kind` by full name with `lookup`: the group's
/// package (named by the group's first label: `apps`, `rbac.authorization.k8s.io` →
/// `rbac`), else `meta/v1` (options kinds). The two groups whose types live outside
/// k8s.io/api have their repository's package: `apiregistration.k8s.io` (kube-aggregator)
/// and `apiextensions.k8s.io` (apiextensions-apiserver). By name, so that tables built from
/// the schema (the Go JSON field order) resolve kinds without keeping the schema loaded.
pub(super) fn resolve<T>(
    api_version: &str,
    kind: &str,
    lookup: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    // Discovery documents of the core group are written without an apiVersion (upstream's
    // stripVersionEncoder): meta/v1's.
    if api_version.is_empty() && DISCOVERY_KINDS.contains(&kind) {
        return lookup(&format!("{META}.{kind}"));
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if version.is_empty() || kind.is_empty() {
        return None;
    }
    let repo = match group {
        "apiregistration.k8s.io" => Some("kube_aggregator.pkg.apis.apiregistration"),
        "apiextensions.k8s.io" => Some("apiextensions_apiserver.pkg.apis.apiextensions"),
        _ => None,
    };
    if let Some(repo) = repo {
        return lookup(&format!("k8s.io.{repo}.{version}.{kind}"));
    }
    // meta.k8s.io/v1beta1 has one message of its own (PartialObjectMetadataList); its
    // other kinds are v1's (Go type aliases).
    if group == "meta.k8s.io" {
        return lookup(&format!(
            "k8s.io.apimachinery.pkg.apis.meta.{version}.{kind}"
        ))
        .or_else(|| lookup(&format!("{META}.{kind}")));
    }
    let package = match group.split('.').next().unwrap_or("") {
        "" => "core",
        first => first,
    };
    lookup(&format!("k8s.io.api.{package}.{version}.{kind}")).or_else(|| {
        (version == "v1")
            .then(|| lookup(&format!("{META}.{kind}")))
            .flatten()
    })
}

/// The protobuf codec's schema, once loaded.
static SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();

/// The schema of the protobuf codec, loaded on first use and kept (protobuf request and
/// response bodies need it for as long as the server runs).
pub(super) fn schema() -> Result<&'static Schema, String> {
    SCHEMA
        .get_or_init(Schema::load)
        .as_ref()
        .map_err(Clone::clone)
}

/// Runs `f` with the schema: the protobuf codec's if it is loaded already, else a transient
/// one dropped afterwards. For tables built once from the schema (the Go JSON field order)
/// that do not need the descriptors afterwards: an idle server that never sees protobuf
/// does not keep the descriptor pool (≈ 4 MB, issue 26).
pub(super) fn with_schema<R>(f: impl FnOnce(&Schema) -> R) -> Result<R, String> {
    match SCHEMA.get() {
        Some(Ok(s)) => Ok(f(s)),
        Some(Err(e)) => Err(e.clone()),
        None => Schema::load().map(|s| f(&s)),
    }
}

/// Decodes a protobuf request body (the `k8s\0` envelope:
/// `runtime.Unknown{typeMeta{apiVersion,kind}, raw, contentEncoding, contentType}`) into the
/// JSON form of the object, `apiVersion` and `kind` included. Errors are human-readable
/// strings (the caller turns them into a 400 Status).
pub fn decode_protobuf(body: &[u8]) -> Result<Map<String, Value>, String> {
    decode_nested(schema()?, body, 0)
}

fn decode_nested(schema: &Schema, body: &[u8], depth: usize) -> Result<Map<String, Value>, String> {
    if depth > MAX_NESTING {
        return Err("protobuf objects are nested too deeply".into());
    }
    let Some(envelope) = body.strip_prefix(MAGIC) else {
        return Err(format!(
            "provided data does not appear to be a protobuf message, expected prefix {:?}",
            MAGIC
        ));
    };
    let unknown_desc = schema
        .pool
        .get_message_by_name(UNKNOWN)
        .ok_or("the protobuf schema lacks runtime.Unknown")?;
    let unknown = DynamicMessage::decode(unknown_desc, envelope)
        .map_err(|e| format!("unable to decode the protobuf envelope: {e}"))?;
    let (api_version, kind) = match field(&unknown, 1) {
        Some(PValue::Message(tm)) => (string_field(tm, 1), string_field(tm, 2)),
        _ => (String::new(), String::new()),
    };
    let raw = bytes_field(&unknown, 2);
    let content_encoding = string_field(&unknown, 3);
    let content_type = string_field(&unknown, 4);
    if !content_encoding.is_empty() {
        return Err(format!(
            "unsupported content encoding {content_encoding:?} in the protobuf envelope"
        ));
    }
    if kind.is_empty() {
        return Err("Object 'Kind' is missing in the protobuf envelope".into());
    }
    if api_version.is_empty() {
        return Err("Object 'apiVersion' is missing in the protobuf envelope".into());
    }
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version.clone()));
    out.insert("kind".into(), Value::String(kind.clone()));
    let base_type = content_type.split(';').next().unwrap_or("").trim();
    match base_type {
        "" | super::PROTOBUF => {
            let desc = schema.message_for(&api_version, &kind).ok_or_else(|| {
                format!("no kind \"{kind}\" is registered for version \"{api_version}\"")
            })?;
            let msg = DynamicMessage::decode(desc, raw)
                .map_err(|e| format!("unable to decode {api_version} {kind} from protobuf: {e}"))?;
            message_fields(schema, &msg, &mut out, depth)?;
        }
        "application/json" => match serde_json::from_slice::<Value>(raw) {
            Ok(Value::Object(obj)) => {
                for (k, v) in obj {
                    out.insert(k, v);
                }
            }
            Ok(_) => return Err("the embedded JSON object is not an object".into()),
            Err(e) => return Err(format!("the embedded JSON object is invalid: {e}")),
        },
        other => {
            return Err(format!(
                "unsupported content type {other:?} in the protobuf envelope"
            ));
        }
    }
    Ok(out)
}

/// The value of field `number` if it is set.
fn field(msg: &DynamicMessage, number: u32) -> Option<&PValue> {
    msg.fields()
        .find(|(fd, _)| fd.number() == number)
        .map(|(_, v)| v)
}

fn string_field(msg: &DynamicMessage, number: u32) -> String {
    match field(msg, number) {
        Some(PValue::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn bytes_field(msg: &DynamicMessage, number: u32) -> &[u8] {
    match field(msg, number) {
        Some(PValue::Bytes(b)) => b,
        _ => &[],
    }
}

fn int_field(msg: &DynamicMessage, number: u32) -> i64 {
    match field(msg, number) {
        Some(PValue::I64(v)) => *v,
        Some(PValue::I32(v)) => i64::from(*v),
        _ => 0,
    }
}

/// Writes the JSON fields of `msg` into `out` (inlined structs merged in).
fn message_fields(
    schema: &Schema,
    msg: &DynamicMessage,
    out: &mut Map<String, Value>,
    depth: usize,
) -> Result<(), String> {
    let rules = schema.rules.get(msg.descriptor().full_name());
    for (fd, value) in msg.fields() {
        let rule = rules.and_then(|r| r.get(&fd.number()));
        if let (Some(FieldRule { inline: true, .. }), PValue::Message(inner)) = (rule, value) {
            message_fields(schema, inner, out, depth)?;
            continue;
        }
        let keep_zero = rule.is_some_and(|r| r.keep_zero);
        if !fd.is_list() && !fd.is_map() && !keep_zero && is_zero_scalar(value) {
            continue;
        }
        let name = match rule.and_then(|r| r.json_name.as_deref()) {
            Some(name) => name.to_owned(),
            None => fd.name().to_owned(),
        };
        out.insert(name, to_json(schema, value, depth)?);
    }
    Ok(())
}

/// Whether `value` is a scalar at its zero value (the Go zero value of a non-pointer field).
fn is_zero_scalar(value: &PValue) -> bool {
    match value {
        PValue::Bool(b) => !b,
        PValue::I32(v) => *v == 0,
        PValue::I64(v) => *v == 0,
        PValue::U32(v) => *v == 0,
        PValue::U64(v) => *v == 0,
        PValue::F32(v) => *v == 0.0,
        PValue::F64(v) => *v == 0.0,
        PValue::String(s) => s.is_empty(),
        PValue::Bytes(b) => b.is_empty(),
        PValue::EnumNumber(v) => *v == 0,
        PValue::Message(_) | PValue::List(_) | PValue::Map(_) => false,
    }
}

fn to_json(schema: &Schema, value: &PValue, depth: usize) -> Result<Value, String> {
    Ok(match value {
        PValue::Bool(b) => Value::Bool(*b),
        PValue::I32(v) => Value::from(*v),
        PValue::I64(v) => Value::from(*v),
        PValue::U32(v) => Value::from(*v),
        PValue::U64(v) => Value::from(*v),
        PValue::EnumNumber(v) => Value::from(*v),
        PValue::F32(v) => float(f64::from(*v))?,
        PValue::F64(v) => float(*v)?,
        PValue::String(s) => Value::String(s.clone()),
        PValue::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        PValue::List(items) => Value::Array(
            items
                .iter()
                .map(|v| to_json(schema, v, depth))
                .collect::<Result<_, _>>()?,
        ),
        PValue::Map(entries) => {
            let mut obj = Map::new();
            for (k, v) in entries {
                let k = match k {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(i) => i.to_string(),
                    MapKey::I64(i) => i.to_string(),
                    MapKey::U32(i) => i.to_string(),
                    MapKey::U64(i) => i.to_string(),
                };
                obj.insert(k, to_json(schema, v, depth)?);
            }
            Value::Object(obj)
        }
        PValue::Message(msg) => message_to_json(schema, msg, depth)?,
    })
}

fn float(v: f64) -> Result<Value, String> {
    Number::from_f64(v)
        .map(Value::Number)
        .ok_or_else(|| format!("the number {v} has no JSON form"))
}

/// A message's JSON: the special types by name, else an object of its fields.
fn message_to_json(schema: &Schema, msg: &DynamicMessage, depth: usize) -> Result<Value, String> {
    let name = msg.descriptor().full_name().to_owned();
    match name.as_str() {
        TIME => {
            // Upstream's Time.Unmarshal: an empty message is the zero time (JSON null), and
            // only whole seconds are kept.
            if msg.fields().next().is_none() {
                return Ok(Value::Null);
            }
            Ok(Value::String(format_time(int_field(msg, 1), None)?))
        }
        MICRO_TIME => {
            if msg.fields().next().is_none() {
                return Ok(Value::Null);
            }
            let nanos = int_field(msg, 2);
            Ok(Value::String(format_time(int_field(msg, 1), Some(nanos))?))
        }
        DURATION => Ok(Value::String(go_duration(int_field(msg, 1)))),
        QUANTITY => Ok(Value::String(match field(msg, 1) {
            Some(PValue::String(s)) if !s.is_empty() => s.clone(),
            _ => "0".to_owned(),
        })),
        INT_OR_STRING => Ok(if int_field(msg, 1) == 1 {
            Value::String(string_field(msg, 3))
        } else {
            Value::from(int_field(msg, 2))
        }),
        RAW_EXTENSION => {
            let raw = bytes_field(msg, 1);
            if raw.is_empty() {
                Ok(Value::Null)
            } else if raw.starts_with(MAGIC) {
                Ok(Value::Object(decode_nested(schema, raw, depth + 1)?))
            } else {
                serde_json::from_slice(raw)
                    .map_err(|e| format!("an embedded object (RawExtension) is not JSON: {e}"))
            }
        }
        FIELDS_V1 => {
            let raw = bytes_field(msg, 1);
            if raw.is_empty() {
                Ok(Value::Null)
            } else {
                serde_json::from_slice(raw)
                    .map_err(|e| format!("managedFields fieldsV1 is not JSON: {e}"))
            }
        }
        EXT_JSON => {
            let raw = bytes_field(msg, 1);
            if raw.is_empty() {
                Ok(Value::Null)
            } else {
                serde_json::from_slice(raw).map_err(|e| {
                    format!("a JSON schema value (default, enum, example) is not JSON: {e}")
                })
            }
        }
        // The unions as their MarshalJSON writes them (apiextensions/v1/marshal.go).
        SCHEMA_OR_ARRAY => match (field(msg, 2), field(msg, 1)) {
            (Some(items @ PValue::List(l)), _) if !l.is_empty() => to_json(schema, items, depth),
            (_, Some(schema_props)) => to_json(schema, schema_props, depth),
            _ => Ok(Value::Null),
        },
        SCHEMA_OR_BOOL => match field(msg, 2) {
            Some(schema_props) => to_json(schema, schema_props, depth),
            None => Ok(Value::Bool(matches!(
                field(msg, 1),
                Some(PValue::Bool(true))
            ))),
        },
        SCHEMA_OR_STRINGS => match (field(msg, 2), field(msg, 1)) {
            (Some(items @ PValue::List(l)), _) if !l.is_empty() => to_json(schema, items, depth),
            (_, Some(schema_props)) => to_json(schema, schema_props, depth),
            _ => Ok(Value::Null),
        },
        _ if name == VERBS || name.ends_with(".ExtraValue") => match field(msg, 1) {
            Some(items) => to_json(schema, items, depth),
            None => Ok(Value::Array(Vec::new())),
        },
        _ => {
            let mut obj = Map::new();
            message_fields(schema, msg, &mut obj, depth)?;
            Ok(Value::Object(obj))
        }
    }
}

/// RFC 3339 in UTC as upstream writes it: whole seconds for `Time`, microseconds for
/// `MicroTime` (`nanos` given).
fn format_time(seconds: i64, nanos: Option<i64>) -> Result<String, String> {
    let ts = jiff::Timestamp::from_second(seconds)
        .map_err(|e| format!("timestamp {seconds} is out of range: {e}"))?;
    let base = ts.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    Ok(match nanos {
        None => format!("{base}Z"),
        Some(n) => format!("{base}.{:06}Z", n.clamp(0, 999_999_999) / 1000),
    })
}

/// Go's `time.Duration.String()` for a count of nanoseconds.
fn go_duration(nanos: i64) -> String {
    let neg = nanos < 0;
    let mut u = nanos.unsigned_abs();
    let mut out = String::new();
    if u == 0 {
        return "0s".into();
    }
    if u < 1_000_000_000 {
        let (prec, unit) = if u < 1_000 {
            (0, "ns")
        } else if u < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        let (frac, int) = fraction(u, prec);
        out.push_str(&int.to_string());
        out.push_str(&frac);
        out.push_str(unit);
    } else {
        let (frac, secs) = fraction(u, 9);
        u = secs;
        let s = format!("{}{frac}s", u % 60);
        u /= 60;
        if u > 0 {
            let m = u % 60;
            u /= 60;
            if u > 0 {
                out.push_str(&format!("{u}h"));
            }
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&s);
    }
    if neg {
        out.insert(0, '-');
    }
    out
}

/// Splits `v` into `v / 10^prec` and the fraction `.ddd` (trailing zeros trimmed, empty when
/// zero), as Go's `fmtFrac`.
fn fraction(v: u64, prec: u32) -> (String, u64) {
    let scale = 10u64.pow(prec);
    let digits = v % scale;
    if digits == 0 {
        return (String::new(), v / scale);
    }
    let s = format!("{digits:0width$}", width = prec as usize);
    (format!(".{}", s.trim_end_matches('0')), v / scale)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn go_duration_matches_go() {
        for (n, want) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (2_000_000, "2ms"),
            (1_000_000_000, "1s"),
            (1_500_000_000, "1.5s"),
            (60_000_000_000, "1m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_723_000_000_000, "1h2m3s"),
            (-90_000_000_000, "-1m30s"),
        ] {
            assert_eq!(go_duration(n), want, "{n}ns");
        }
    }

    #[test]
    fn times_format_as_upstream() {
        assert_eq!(
            format_time(1_700_000_000, None).unwrap(),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            format_time(1_700_000_000, Some(123_456_789)).unwrap(),
            "2023-11-14T22:13:20.123456Z"
        );
    }

    /// Every entry of `json_fields.txt` names a field of the compiled schema (the table and
    /// the protos come from the same upstream tag).
    #[test]
    fn json_fields_match_the_schema() {
        let s = schema().unwrap();
        let mut checked = 0;
        for (message, fields) in &s.rules {
            // Go structs of pkg/runtime without a proto message (e.g. helpers) are skipped.
            let Some(desc) = s.pool.get_message_by_name(message) else {
                assert!(
                    message.starts_with("k8s.io.apimachinery.pkg.runtime."),
                    "{message} missing from the schema"
                );
                continue;
            };
            for number in fields.keys() {
                assert!(
                    desc.get_field(*number).is_some(),
                    "{message} has no field {number}"
                );
                checked += 1;
            }
        }
        assert!(checked > 900, "only {checked} entries checked");
    }

    #[test]
    fn kinds_resolve_to_messages() {
        let s = schema().unwrap();
        for (av, kind, want) in [
            ("v1", "ConfigMap", "k8s.io.api.core.v1.ConfigMap"),
            ("apps/v1", "Deployment", "k8s.io.api.apps.v1.Deployment"),
            (
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                "k8s.io.api.rbac.v1.ClusterRole",
            ),
            (
                "authorization.k8s.io/v1",
                "SelfSubjectAccessReview",
                "k8s.io.api.authorization.v1.SelfSubjectAccessReview",
            ),
            (
                "coordination.k8s.io/v1",
                "Lease",
                "k8s.io.api.coordination.v1.Lease",
            ),
            (
                "flowcontrol.apiserver.k8s.io/v1",
                "FlowSchema",
                "k8s.io.api.flowcontrol.v1.FlowSchema",
            ),
            (
                "v1",
                "DeleteOptions",
                "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
            ),
        ] {
            assert_eq!(
                s.message_for(av, kind).map(|d| d.full_name().to_owned()),
                Some(want.to_owned())
            );
        }
        assert!(s.message_for("v1", "NoSuchKind").is_none());
        assert!(s.message_for("", "ConfigMap").is_none());
    }

    #[test]
    fn rejects_what_is_not_an_envelope() {
        assert!(
            decode_protobuf(b"{}")
                .unwrap_err()
                .contains("does not appear to be a protobuf message")
        );
        // Unknown{typeMeta{apiVersion: "v1"}} with no kind.
        let err = decode_protobuf(b"k8s\0\x0a\x04\x0a\x02v1").unwrap_err();
        assert!(err.contains("Kind"), "{err}");
        // Unknown{typeMeta{apiVersion: "v1", kind: "Nope"}}.
        let err = decode_protobuf(b"k8s\0\x0a\x0a\x0a\x02v1\x12\x04Nope").unwrap_err();
        assert!(err.contains("no kind \"Nope\""), "{err}");
        // Truncated envelope.
        assert!(decode_protobuf(b"k8s\0\x0a\x10\x0a").is_err());
    }
}
