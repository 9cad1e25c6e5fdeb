//! Go's `%v` rendering of decoded JSON (`map[k:v]`, `[a b]`, `<nil>`), for error messages
//! worded as upstream's.

use serde_json::{Map, Value};

/// `fmt.Sprintf("%v", v)` of a value decoded by `encoding/json` into `interface{}`.
pub(super) fn value(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(value).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(m) => map(m),
    }
}

/// `%v` of a `map[string]interface{}`: keys sorted, `map[k:v k2:v2]`.
pub(super) fn map(m: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let parts: Vec<String> = keys
        .into_iter()
        .map(|k| format!("{k}:{}", m.get(k).map(value).unwrap_or_default()))
        .collect();
    format!("map[{}]", parts.join(" "))
}

/// Go's `reflect.TypeOf` name of a decoded JSON value.
pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}
