//! The protobuf form of the Swagger 2.0 document: gnostic's `openapi.v2.Document` message
//! (github.com/google/gnostic `openapiv2/OpenAPIv2.proto`), which kube-apiserver serves for
//! `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf` and kubectl reads
//! (e.g. for `kubectl explain --output=plaintext-openapiv2`).
//!
//! Only the messages our document needs are declared, with the proto's field numbers.
//! Vendor extensions (`x-kubernetes-*`) and other free-form values (`default`, `enum`,
//! `example`) are `Any` messages carrying the YAML text of the value, as gnostic writes them;
//! the YAML is the JSON text for collections (JSON is YAML flow style) and a plain or
//! double-quoted scalar otherwise.

use prost::Message;
use serde_json::{Map, Value};

/// `openapi.v2.Document`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Document {
    #[prost(string, tag = "1")]
    pub(crate) swagger: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) info: Option<Info>,
    #[prost(string, tag = "3")]
    pub(crate) host: String,
    #[prost(string, tag = "4")]
    pub(crate) base_path: String,
    #[prost(string, repeated, tag = "5")]
    pub(crate) schemes: Vec<String>,
    #[prost(string, repeated, tag = "6")]
    pub(crate) consumes: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub(crate) produces: Vec<String>,
    #[prost(message, optional, tag = "8")]
    pub(crate) paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub(crate) definitions: Option<Definitions>,
    #[prost(message, repeated, tag = "16")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Info`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Info {
    #[prost(string, tag = "1")]
    pub(crate) title: String,
    #[prost(string, tag = "2")]
    pub(crate) version: String,
    #[prost(string, tag = "3")]
    pub(crate) description: String,
    #[prost(message, repeated, tag = "7")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Any`: `value` (a `google.protobuf.Any`, unused here) or the value's YAML.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Any {
    #[prost(string, tag = "2")]
    pub(crate) yaml: String,
}

/// `openapi.v2.NamedAny`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct NamedAny {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<Any>,
}

/// `openapi.v2.Paths`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Paths {
    #[prost(message, repeated, tag = "1")]
    pub(crate) vendor_extension: Vec<NamedAny>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) path: Vec<NamedPathItem>,
}

/// `openapi.v2.NamedPathItem`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<PathItem>,
}

/// `openapi.v2.PathItem`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct PathItem {
    #[prost(string, tag = "1")]
    pub(crate) r#ref: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub(crate) put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub(crate) post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub(crate) delete: Option<Operation>,
    #[prost(message, optional, tag = "6")]
    pub(crate) options: Option<Operation>,
    #[prost(message, optional, tag = "7")]
    pub(crate) head: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub(crate) patch: Option<Operation>,
    #[prost(message, repeated, tag = "9")]
    pub(crate) parameters: Vec<ParametersItem>,
    #[prost(message, repeated, tag = "10")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Operation`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Operation {
    #[prost(string, repeated, tag = "1")]
    pub(crate) tags: Vec<String>,
    #[prost(string, tag = "2")]
    pub(crate) summary: String,
    #[prost(string, tag = "3")]
    pub(crate) description: String,
    #[prost(string, tag = "5")]
    pub(crate) operation_id: String,
    #[prost(string, repeated, tag = "6")]
    pub(crate) produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub(crate) consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub(crate) parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub(crate) responses: Option<Responses>,
    #[prost(string, repeated, tag = "10")]
    pub(crate) schemes: Vec<String>,
    #[prost(bool, tag = "11")]
    pub(crate) deprecated: bool,
    #[prost(message, repeated, tag = "13")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.ParametersItem` (only the `parameter` arm; we emit no `$ref` parameters).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct ParametersItem {
    #[prost(message, optional, tag = "1")]
    pub(crate) parameter: Option<Parameter>,
}

/// `openapi.v2.Parameter`: `body_parameter` (1) or `non_body_parameter` (2).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Parameter {
    #[prost(oneof = "ParameterKind", tags = "1, 2")]
    pub(crate) oneof: Option<ParameterKind>,
}

/// The `oneof` of `openapi.v2.Parameter`.
// Short-lived conversion values, built once; boxing would only add indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum ParameterKind {
    #[prost(message, tag = "1")]
    BodyParameter(BodyParameter),
    #[prost(message, tag = "2")]
    NonBodyParameter(NonBodyParameter),
}

/// `openapi.v2.BodyParameter`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct BodyParameter {
    #[prost(string, tag = "1")]
    pub(crate) description: String,
    #[prost(string, tag = "2")]
    pub(crate) name: String,
    #[prost(string, tag = "3")]
    pub(crate) r#in: String,
    #[prost(bool, tag = "4")]
    pub(crate) required: bool,
    #[prost(message, optional, tag = "5")]
    pub(crate) schema: Option<Schema>,
    #[prost(message, repeated, tag = "6")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.NonBodyParameter`: header (1), formData (2), query (3) or path (4).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct NonBodyParameter {
    #[prost(oneof = "NonBodyKind", tags = "1, 2, 3, 4")]
    pub(crate) oneof: Option<NonBodyKind>,
}

/// The `oneof` of `openapi.v2.NonBodyParameter`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum NonBodyKind {
    #[prost(message, tag = "1")]
    Header(SimpleParameter),
    #[prost(message, tag = "3")]
    Query(QueryParameter),
    #[prost(message, tag = "4")]
    Path(SimpleParameter),
}

/// The common leading fields of `HeaderParameterSubSchema` and `PathParameterSubSchema`
/// (same numbers in both).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SimpleParameter {
    #[prost(bool, tag = "1")]
    pub(crate) required: bool,
    #[prost(string, tag = "2")]
    pub(crate) r#in: String,
    #[prost(string, tag = "3")]
    pub(crate) description: String,
    #[prost(string, tag = "4")]
    pub(crate) name: String,
    #[prost(string, tag = "5")]
    pub(crate) r#type: String,
    #[prost(string, tag = "6")]
    pub(crate) format: String,
    #[prost(bool, tag = "19")]
    pub(crate) unique_items: bool,
    #[prost(message, repeated, tag = "22")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.QueryParameterSubSchema` (the fields we use).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct QueryParameter {
    #[prost(bool, tag = "1")]
    pub(crate) required: bool,
    #[prost(string, tag = "2")]
    pub(crate) r#in: String,
    #[prost(string, tag = "3")]
    pub(crate) description: String,
    #[prost(string, tag = "4")]
    pub(crate) name: String,
    #[prost(bool, tag = "5")]
    pub(crate) allow_empty_value: bool,
    #[prost(string, tag = "6")]
    pub(crate) r#type: String,
    #[prost(string, tag = "7")]
    pub(crate) format: String,
    #[prost(bool, tag = "20")]
    pub(crate) unique_items: bool,
    #[prost(message, repeated, tag = "23")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Responses`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub(crate) response_code: Vec<NamedResponseValue>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.NamedResponseValue`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<ResponseValue>,
}

/// `openapi.v2.ResponseValue` (only the `response` arm).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct ResponseValue {
    #[prost(message, optional, tag = "1")]
    pub(crate) response: Option<Response>,
}

/// `openapi.v2.Response`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Response {
    #[prost(string, tag = "1")]
    pub(crate) description: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) schema: Option<SchemaItem>,
    #[prost(message, repeated, tag = "5")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.SchemaItem` (only the `schema` arm).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SchemaItem {
    #[prost(message, optional, tag = "1")]
    pub(crate) schema: Option<Schema>,
}

/// `openapi.v2.Definitions`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub(crate) additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.Properties`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub(crate) additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.NamedSchema`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct NamedSchema {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<Schema>,
}

/// `openapi.v2.TypeItem`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub(crate) value: Vec<String>,
}

/// `openapi.v2.ItemsItem`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub(crate) schema: Vec<Schema>,
}

/// `openapi.v2.AdditionalPropertiesItem`: a schema (1) or a boolean (2).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct AdditionalPropertiesItem {
    #[prost(oneof = "AdditionalProperties", tags = "1, 2")]
    pub(crate) oneof: Option<AdditionalProperties>,
}

/// The `oneof` of `openapi.v2.AdditionalPropertiesItem`.
// Short-lived conversion values, built once; boxing would only add indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum AdditionalProperties {
    #[prost(message, tag = "1")]
    Schema(Schema),
    #[prost(bool, tag = "2")]
    Boolean(bool),
}

/// `openapi.v2.Schema`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Schema {
    #[prost(string, tag = "1")]
    pub(crate) r#ref: String,
    #[prost(string, tag = "2")]
    pub(crate) format: String,
    #[prost(string, tag = "3")]
    pub(crate) title: String,
    #[prost(string, tag = "4")]
    pub(crate) description: String,
    #[prost(message, optional, tag = "5")]
    pub(crate) default: Option<Any>,
    #[prost(double, tag = "6")]
    pub(crate) multiple_of: f64,
    #[prost(double, tag = "7")]
    pub(crate) maximum: f64,
    #[prost(bool, tag = "8")]
    pub(crate) exclusive_maximum: bool,
    #[prost(double, tag = "9")]
    pub(crate) minimum: f64,
    #[prost(bool, tag = "10")]
    pub(crate) exclusive_minimum: bool,
    #[prost(int64, tag = "11")]
    pub(crate) max_length: i64,
    #[prost(int64, tag = "12")]
    pub(crate) min_length: i64,
    #[prost(string, tag = "13")]
    pub(crate) pattern: String,
    #[prost(int64, tag = "14")]
    pub(crate) max_items: i64,
    #[prost(int64, tag = "15")]
    pub(crate) min_items: i64,
    #[prost(bool, tag = "16")]
    pub(crate) unique_items: bool,
    #[prost(int64, tag = "17")]
    pub(crate) max_properties: i64,
    #[prost(int64, tag = "18")]
    pub(crate) min_properties: i64,
    #[prost(string, repeated, tag = "19")]
    pub(crate) required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub(crate) r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub(crate) additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub(crate) r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub(crate) items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub(crate) all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub(crate) properties: Option<Properties>,
    #[prost(string, tag = "26")]
    pub(crate) discriminator: String,
    #[prost(bool, tag = "27")]
    pub(crate) read_only: bool,
    #[prost(message, optional, tag = "30")]
    pub(crate) example: Option<Any>,
    #[prost(message, repeated, tag = "31")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// Encodes the Swagger 2.0 JSON document as an `openapi.v2.Document`.
pub(crate) fn encode(doc: &Value) -> Vec<u8> {
    document(doc).encode_to_vec()
}

/// Converts the Swagger 2.0 JSON document to the message.
pub(crate) fn document(doc: &Value) -> Document {
    let info = doc.get("info").map(|i| Info {
        title: string(i, "title"),
        version: string(i, "version"),
        description: string(i, "description"),
        vendor_extension: extensions(i),
    });
    let paths = doc.get("paths").and_then(Value::as_object).map(|p| Paths {
        vendor_extension: Vec::new(),
        path: p
            .iter()
            .filter(|(k, _)| !k.starts_with("x-"))
            .map(|(name, item)| NamedPathItem {
                name: name.clone(),
                value: Some(path_item(item)),
            })
            .collect(),
    });
    let definitions = doc
        .get("definitions")
        .and_then(Value::as_object)
        .map(|d| Definitions {
            additional_properties: named_schemas(d),
        });
    Document {
        swagger: string(doc, "swagger"),
        info,
        host: string(doc, "host"),
        base_path: string(doc, "basePath"),
        schemes: strings(doc, "schemes"),
        consumes: strings(doc, "consumes"),
        produces: strings(doc, "produces"),
        paths,
        definitions,
        vendor_extension: extensions(doc),
    }
}

fn string(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn boolean(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn float(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn int(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0)
}

fn any(v: &Value) -> Any {
    Any { yaml: yaml(v) }
}

/// The `x-*` members of an object, in order, as `NamedAny`s.
fn extensions(v: &Value) -> Vec<NamedAny> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny {
            name: k.clone(),
            value: Some(any(v)),
        })
        .collect()
}

/// The YAML text of a JSON value, newline-terminated as gnostic's `yaml.Marshal` output is:
/// collections in flow style (their JSON text), scalars plain unless they need quoting.
pub(crate) fn yaml(v: &Value) -> String {
    let text = match v {
        Value::String(s) if plain_safe(s) => s.clone(),
        other => other.to_string(),
    };
    format!("{text}\n")
}

/// Whether a string can be written as a plain YAML scalar and read back as the same string.
fn plain_safe(s: &str) -> bool {
    let reserved = matches!(
        s.to_ascii_lowercase().as_str(),
        "" | "~" | "null" | "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n"
    );
    let numeric = s.parse::<f64>().is_ok() || s.starts_with('.');
    let first_ok = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/');
    let chars_ok = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ' ' | ','));
    !reserved && !numeric && first_ok && chars_ok && !s.ends_with(' ')
}

fn named_schemas(map: &Map<String, Value>) -> Vec<NamedSchema> {
    map.iter()
        .map(|(name, s)| NamedSchema {
            name: name.clone(),
            value: Some(schema(s)),
        })
        .collect()
}

/// Converts one JSON Schema object.
pub(crate) fn schema(v: &Value) -> Schema {
    let additional_properties = v.get("additionalProperties").and_then(|a| {
        let oneof = match a {
            Value::Bool(b) => AdditionalProperties::Boolean(*b),
            Value::Object(_) => AdditionalProperties::Schema(schema(a)),
            _ => return None,
        };
        Some(Box::new(AdditionalPropertiesItem { oneof: Some(oneof) }))
    });
    let r#type = match v.get("type") {
        Some(Value::String(t)) => Some(TypeItem {
            value: vec![t.clone()],
        }),
        Some(Value::Array(ts)) => Some(TypeItem {
            value: ts
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        }),
        _ => None,
    };
    let items = match v.get("items") {
        Some(Value::Array(list)) => Some(ItemsItem {
            schema: list.iter().map(schema).collect(),
        }),
        Some(item @ Value::Object(_)) => Some(ItemsItem {
            schema: vec![schema(item)],
        }),
        _ => None,
    };
    // `allOf: [{$ref}]` (how the v3 documents attach a description to a reference) is
    // upstream's v2 form `{$ref, description}`, which v2 readers (kubectl's proto models)
    // resolve; they do not look into `allOf`.
    let mut r#ref = string(v, "$ref");
    let mut all_of: Vec<Schema> = v
        .get("allOf")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(schema).collect())
        .unwrap_or_default();
    if r#ref.is_empty()
        && r#type.is_none()
        && let [only] = all_of.as_slice()
        && !only.r#ref.is_empty()
        && only.properties.is_none()
        && only.r#type.is_none()
    {
        r#ref = only.r#ref.clone();
        all_of.clear();
    }
    Schema {
        r#ref,
        format: string(v, "format"),
        title: string(v, "title"),
        description: string(v, "description"),
        default: v.get("default").map(any),
        multiple_of: float(v, "multipleOf"),
        maximum: float(v, "maximum"),
        exclusive_maximum: boolean(v, "exclusiveMaximum"),
        minimum: float(v, "minimum"),
        exclusive_minimum: boolean(v, "exclusiveMinimum"),
        max_length: int(v, "maxLength"),
        min_length: int(v, "minLength"),
        pattern: string(v, "pattern"),
        max_items: int(v, "maxItems"),
        min_items: int(v, "minItems"),
        unique_items: boolean(v, "uniqueItems"),
        max_properties: int(v, "maxProperties"),
        min_properties: int(v, "minProperties"),
        required: strings(v, "required"),
        r#enum: v
            .get("enum")
            .and_then(Value::as_array)
            .map(|e| e.iter().map(any).collect())
            .unwrap_or_default(),
        additional_properties,
        r#type,
        items,
        all_of,
        properties: v
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| Properties {
                additional_properties: named_schemas(p),
            }),
        discriminator: string(v, "discriminator"),
        read_only: boolean(v, "readOnly"),
        example: v.get("example").map(any),
        vendor_extension: extensions(v),
    }
}

fn path_item(v: &Value) -> PathItem {
    let op = |method: &str| v.get(method).map(operation);
    PathItem {
        r#ref: string(v, "$ref"),
        get: op("get"),
        put: op("put"),
        post: op("post"),
        delete: op("delete"),
        options: op("options"),
        head: op("head"),
        patch: op("patch"),
        parameters: parameters(v),
        vendor_extension: extensions(v),
    }
}

fn operation(v: &Value) -> Operation {
    let responses = v
        .get("responses")
        .and_then(Value::as_object)
        .map(|r| Responses {
            response_code: r
                .iter()
                .filter(|(k, _)| !k.starts_with("x-"))
                .map(|(code, resp)| NamedResponseValue {
                    name: code.clone(),
                    value: Some(ResponseValue {
                        response: Some(Response {
                            description: string(resp, "description"),
                            schema: resp.get("schema").map(|s| SchemaItem {
                                schema: Some(schema(s)),
                            }),
                            vendor_extension: extensions(resp),
                        }),
                    }),
                })
                .collect(),
            vendor_extension: extensions(&Value::Object(r.clone())),
        });
    Operation {
        tags: strings(v, "tags"),
        summary: string(v, "summary"),
        description: string(v, "description"),
        operation_id: string(v, "operationId"),
        produces: strings(v, "produces"),
        consumes: strings(v, "consumes"),
        parameters: parameters(v),
        responses,
        schemes: strings(v, "schemes"),
        deprecated: boolean(v, "deprecated"),
        vendor_extension: extensions(v),
    }
}

fn parameters(v: &Value) -> Vec<ParametersItem> {
    v.get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let kind = match p.get("in").and_then(Value::as_str)? {
                "body" => ParameterKind::BodyParameter(BodyParameter {
                    description: string(p, "description"),
                    name: string(p, "name"),
                    r#in: "body".to_owned(),
                    required: boolean(p, "required"),
                    schema: p.get("schema").map(schema),
                    vendor_extension: extensions(p),
                }),
                "query" => ParameterKind::NonBodyParameter(NonBodyParameter {
                    oneof: Some(NonBodyKind::Query(QueryParameter {
                        required: boolean(p, "required"),
                        r#in: "query".to_owned(),
                        description: string(p, "description"),
                        name: string(p, "name"),
                        allow_empty_value: boolean(p, "allowEmptyValue"),
                        r#type: string(p, "type"),
                        format: string(p, "format"),
                        unique_items: boolean(p, "uniqueItems"),
                        vendor_extension: extensions(p),
                    })),
                }),
                place @ ("path" | "header") => {
                    let simple = SimpleParameter {
                        required: boolean(p, "required"),
                        r#in: place.to_owned(),
                        description: string(p, "description"),
                        name: string(p, "name"),
                        r#type: string(p, "type"),
                        format: string(p, "format"),
                        unique_items: boolean(p, "uniqueItems"),
                        vendor_extension: extensions(p),
                    };
                    ParameterKind::NonBodyParameter(NonBodyParameter {
                        oneof: Some(if place == "path" {
                            NonBodyKind::Path(simple)
                        } else {
                            NonBodyKind::Header(simple)
                        }),
                    })
                }
                _ => return None,
            };
            Some(ParametersItem {
                parameter: Some(Parameter { oneof: Some(kind) }),
            })
        })
        .collect()
}
