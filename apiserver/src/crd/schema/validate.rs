//! OpenAPI v3 validation of a custom resource, as upstream runs it in the custom resource
//! strategy: kube-openapi's `SchemaValidator` (`pkg/validation/validate`) on the whole object,
//! its results turned into field errors as `apiextensions-apiserver/pkg/apiserver/validation`
//! does (`kubeOpenAPIResultToFieldErrors`), then the embedded-resource checks
//! (`schema/objectmeta`) and the uniqueness of `set` and `map` lists (`schema/listtype`).
//!
//! Messages keep kube-openapi's wording, `in body` included: `Invalid value: "abc":
//! spec.size in body must be of type integer: "string"`, `Invalid value: 0: spec.size in
//! body should be greater than or equal to 1`, `Unsupported value: "x": supported values:
//! "a", "b"`, `Too long: may not be more than 10 bytes`. Errors that kube-openapi reports
//! without a field (`anyOf`, `oneOf`, `allOf`, `not`) get upstream's `<nil>` field.
//!
//! Upstream walks Go maps in random order; here properties are visited in name order, so the
//! order of errors is stable but may differ from one upstream run.

use serde_json::{Map, Value};

use super::gofmt::{self, bad_value, quote};
use super::{AdditionalProperties, Structural, format, meta};
use crate::error::FieldError;

/// Validates custom resource `obj` (the whole object) against the schema of its version.
/// Returns every problem with upstream's field path, reason and message.
pub fn validate(schema: &Structural, obj: &Value) -> Vec<FieldError> {
    let mut errs = node(schema, obj, "").errs;
    errs.extend(meta::validate_embedded(schema, obj));
    if let Value::Object(o) = obj {
        list_sets_and_maps_object(&mut errs, "", schema, o);
    }
    errs
}

/// kube-openapi's validation alone (no embedded-resource or list checks), with every field
/// placed under `prefix` as upstream's `ValidateCustomResource(prefix, …)` does: errors about
/// the value itself get `prefix` as their field.
pub(super) fn validate_under(schema: &Structural, v: &Value, prefix: &str) -> Vec<FieldError> {
    let mut errs = node(schema, v, "").errs;
    for e in &mut errs {
        e.field = if e.field == "<nil>" {
            prefix.to_owned()
        } else {
            format!("{prefix}.{}", e.field)
        };
    }
    errs
}

/// What kube-openapi's `Result` carries that matters here: the errors and the match count
/// used to pick the "best" failing `anyOf`/`oneOf` branch.
#[derive(Default)]
struct Res {
    errs: Vec<FieldError>,
    matches: usize,
}

impl Res {
    fn merge(&mut self, other: Res) {
        self.errs.extend(other.errs);
        self.matches += other.matches;
    }
    fn err(e: FieldError) -> Res {
        Res {
            errs: vec![e],
            matches: 0,
        }
    }
    fn valid(&self) -> bool {
        self.errs.is_empty()
    }
}

/// The field of a kube-openapi error named `name`: the name without its leading dot, `<nil>`
/// for the root.
fn field_of(name: &str) -> String {
    match name.strip_prefix('.').unwrap_or(name) {
        "" => "<nil>".to_owned(),
        f => f.to_owned(),
    }
}

/// An error kube-openapi reports without a field (`errors.New`): upstream turns it into
/// `field.Invalid(nil, "", msg)`.
fn composite(msg: &str) -> FieldError {
    gofmt::invalid("<nil>", "\"\"", msg)
}

/// `errors.InvalidType`: a `TypeInvalid` field error whose value is `value` (a string).
fn invalid_type(name: &str, type_name: &str, value: &str) -> FieldError {
    gofmt::type_invalid(
        &field_of(name),
        &quote(value),
        &format!(
            "{name} in body must be of type {type_name}: {}",
            quote(value)
        ),
    )
}

/// Any other kube-openapi validation error: `field.Invalid(path, value, message)`.
fn invalid(name: &str, value: &str, msg: &str) -> FieldError {
    gofmt::invalid(&field_of(name), value, msg)
}

/// The JSON kinds kube-openapi tells apart (numbers as upstream decodes them: `int64` when
/// they are integers, else `float64`).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bool,
    String,
    Int(i64),
    Float(f64),
    Array,
    Object,
}

fn kind(v: &Value) -> Option<Kind> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => Kind::Bool,
        Value::String(_) => Kind::String,
        Value::Number(n) => match n.as_i64() {
            Some(i) => Kind::Int(i),
            None => Kind::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::Array(_) => Kind::Array,
        Value::Object(_) => Kind::Object,
    })
}

/// The schema types of a node: `integer,string` for int-or-string, as upstream converts it.
fn types(s: &Structural) -> Vec<&str> {
    if s.x_int_or_string {
        vec!["integer", "string"]
    } else if s.type_.is_empty() {
        Vec::new()
    } else {
        vec![s.type_.as_str()]
    }
}

/// The format kube-openapi sees: formats CRDs do not support are stripped.
fn effective_format(s: &Structural) -> &str {
    if !s.format.is_empty() && format::check(&s.format, "").is_some() {
        &s.format
    } else {
        ""
    }
}

/// swag's `IsFloat64AJSONInteger`.
fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9007199254740991.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    let g = f.trunc();
    f == g || ((f - g).abs() / (f.abs() + g.abs())) < 1e-9
}

/// `SchemaValidator.Validate` for one schema node at path `name`.
fn node(s: &Structural, data: &Value, name: &str) -> Res {
    let mut r = Res::default();
    let types = types(s);
    let Some(k) = kind(data) else {
        // null: only the type and enum checks run.
        if !types.is_empty() && !s.nullable {
            r.merge(Res::err(invalid_type(name, &types.join(","), "null")));
        } else {
            r.matches += 1;
        }
        if let Some(e) = enum_check(s, data, name) {
            r.errs.push(e);
        }
        return r;
    };
    let fmt = effective_format(s);
    // typeValidator
    if !types.is_empty() || !fmt.is_empty() {
        r.merge(type_check(&types, fmt, k, name));
        r.matches += 1;
    }
    // schemaPropsValidator
    r.merge(schema_props(s, data, name));
    r.matches += 1;
    if let Value::String(v) = data {
        // stringValidator
        if let Some(e) = string_check(s, v, name) {
            r.errs.push(e);
        }
        r.matches += 1;
        // formatValidator
        if !fmt.is_empty() {
            if format::check(fmt, v) == Some(false) {
                r.errs.push(gofmt::type_invalid(
                    &field_of(name),
                    &quote(v),
                    &format!("{name} in body must be of type {fmt}: {}", quote(v)),
                ));
            }
            r.matches += 1;
        }
    }
    if let Kind::Int(_) | Kind::Float(_) = k {
        r.merge(number_check(s, k, data, name));
        r.matches += 1;
    }
    if let Value::Array(items) = data {
        r.merge(slice_check(s, items, name));
        r.matches += 1;
    }
    // basicCommonValidator
    if let Some(e) = enum_check(s, data, name) {
        r.errs.push(e);
    }
    r.matches += 1;
    if let Value::Object(o) = data {
        r.merge(object_check(s, o, name));
        r.matches += 1;
    }
    r.matches += 1;
    r
}

/// kube-openapi's `typeValidator`.
fn type_check(types: &[&str], fmt: &str, k: Kind, name: &str) -> Res {
    let (sch_type, data_format) = match k {
        Kind::Bool => ("boolean", ""),
        Kind::String => ("string", ""),
        Kind::Int(_) => ("integer", "int64"),
        Kind::Float(_) => ("number", "float64"),
        Kind::Array => ("array", ""),
        Kind::Object => ("object", ""),
    };
    let has = |t: &str| types.contains(&t);
    let float_int = matches!(k, Kind::Float(f) if is_json_integer(f)) && has("integer");
    let int_float = matches!(k, Kind::Int(_)) && has("number");
    let stringish = matches!(k, Kind::String | Kind::Array);
    if !(stringish
        || fmt.is_empty()
        || has(sch_type)
        || data_format == fmt
        || float_int
        || int_float)
    {
        return Res::err(invalid_type(name, fmt, data_format));
    }
    if stringish && !(has("number") || has("integer") || fmt.is_empty()) {
        return Res {
            errs: Vec::new(),
            matches: 1,
        };
    }
    if !(has(sch_type) || float_int || int_float) {
        return Res::err(invalid_type(name, &types.join(","), sch_type));
    }
    Res {
        errs: Vec::new(),
        matches: 1,
    }
}

/// kube-openapi's `schemaPropsValidator`: `anyOf`, `oneOf`, `allOf`, `not`.
fn schema_props(s: &Structural, data: &Value, name: &str) -> Res {
    let mut main = Res::default();
    if !s.any_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut succeeded = false;
        for sub in &s.any_of {
            let r = node(sub, data, name);
            if r.valid() {
                succeeded = true;
                best = Some(r);
                break;
            }
            if best.as_ref().is_none_or(|b| r.matches > b.matches) {
                best = Some(r);
            }
        }
        if !succeeded {
            main.errs.push(composite(&format!(
                "{} must validate at least one schema (anyOf)",
                quote(name)
            )));
        }
        if let Some(b) = best {
            main.merge(b);
        }
    }
    if !s.one_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut validated = 0;
        for sub in &s.one_of {
            let r = node(sub, data, name);
            if r.valid() {
                validated += 1;
                best = None;
                if first_success.is_none() {
                    first_success = Some(r);
                }
                continue;
            }
            if validated == 0 && best.as_ref().is_none_or(|b| r.matches > b.matches) {
                best = Some(r);
            }
        }
        if validated != 1 {
            let more = if validated == 0 {
                "Found none valid".to_owned()
            } else {
                format!("Found {validated} valid alternatives")
            };
            main.errs.push(composite(&format!(
                "{} must validate one and only one schema (oneOf). {more}",
                quote(name)
            )));
            if let Some(b) = best {
                main.merge(b);
            }
        } else if let Some(f) = first_success {
            main.merge(f);
        }
    }
    if !s.all_of.is_empty() {
        let mut validated = 0;
        for sub in &s.all_of {
            let r = node(sub, data, name);
            if r.valid() {
                validated += 1;
            }
            main.merge(r);
        }
        if validated != s.all_of.len() {
            let more = if validated == 0 {
                ". None validated"
            } else {
                ""
            };
            main.errs.push(composite(&format!(
                "{} must validate all the schemas (allOf){more}",
                quote(name)
            )));
        }
    }
    if let Some(not) = &s.not
        && node(not, data, name).valid()
    {
        main.errs.push(composite(&format!(
            "{} must not validate the schema (not)",
            quote(name)
        )));
    }
    main.matches += 1;
    main
}

/// kube-openapi's `stringValidator`: the first failing of maxLength, minLength, pattern.
fn string_check(s: &Structural, v: &str, name: &str) -> Option<FieldError> {
    let len = v.chars().count() as i64;
    if let Some(max) = s.max_length
        && len > max
    {
        return Some(gofmt::too_long(&field_of(name), max));
    }
    if let Some(min) = s.min_length
        && len < min
    {
        return Some(invalid(
            name,
            &quote(v),
            &format!("{name} in body should be at least {min} chars long"),
        ));
    }
    if let Some(p) = &s.pattern
        && !p.regex.is_match(v)
    {
        return Some(invalid(
            name,
            &quote(v),
            &format!("{name} in body should match '{}'", p.source),
        ));
    }
    None
}

/// kube-openapi's `numberValidator`: multipleOf, minimum, maximum, compared as integers when
/// the value is one (the bound truncated, as Go's `int64(f)`).
fn number_check(s: &Structural, k: Kind, data: &Value, name: &str) -> Res {
    let mut r = Res::default();
    let value = bad_value(data);
    if let Some(factor) = s.multiple_of {
        match k {
            Kind::Int(i) => {
                let f = factor as i64;
                if f <= 0 {
                    r.errs.push(invalid(
                        name,
                        &value,
                        &format!("factor MultipleOf declared for {name} must be positive: {f}"),
                    ));
                } else if i % f != 0 {
                    r.errs.push(invalid(
                        name,
                        &value,
                        &format!("{name} in body should be a multiple of {f}"),
                    ));
                }
            }
            Kind::Float(d) => {
                if factor <= 0.0 {
                    r.errs.push(invalid(
                        name,
                        &value,
                        &format!(
                            "factor MultipleOf declared for {name} must be positive: {}",
                            gofmt::float(factor)
                        ),
                    ));
                } else {
                    let mult = if factor < 1.0 {
                        1.0 / factor * d
                    } else {
                        d / factor
                    };
                    if !is_json_integer(mult) {
                        r.errs.push(invalid(
                            name,
                            &value,
                            &format!(
                                "{name} in body should be a multiple of {}",
                                gofmt::float(factor)
                            ),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    let bound = |b: f64, exclusive: bool, is_max: bool| -> Option<String> {
        let (fails, shown) = match k {
            Kind::Int(i) => {
                let b = b as i64;
                let fails = match (is_max, exclusive) {
                    (true, false) => i > b,
                    (true, true) => i >= b,
                    (false, false) => i < b,
                    (false, true) => i <= b,
                };
                (fails, b.to_string())
            }
            Kind::Float(d) => {
                let fails = match (is_max, exclusive) {
                    (true, false) => d > b,
                    (true, true) => d >= b,
                    (false, false) => d < b,
                    (false, true) => d <= b,
                };
                (fails, gofmt::float(b))
            }
            _ => (false, String::new()),
        };
        let rel = match (is_max, exclusive) {
            (true, false) => "less than or equal to",
            (true, true) => "less than",
            (false, false) => "greater than or equal to",
            (false, true) => "greater than",
        };
        fails.then(|| format!("{name} in body should be {rel} {shown}"))
    };
    if let Some(min) = s.minimum
        && let Some(msg) = bound(min, s.exclusive_minimum, false)
    {
        r.errs.push(invalid(name, &value, &msg));
    }
    if let Some(max) = s.maximum
        && let Some(msg) = bound(max, s.exclusive_maximum, true)
    {
        r.errs.push(invalid(name, &value, &msg));
    }
    r.matches += 1;
    r
}

/// kube-openapi's `schemaSliceValidator`: items, minItems, maxItems, uniqueItems.
fn slice_check(s: &Structural, items: &[Value], name: &str) -> Res {
    let mut r = Res::default();
    if let Some(item_schema) = &s.items {
        for (i, v) in items.iter().enumerate() {
            r.merge(node(item_schema, v, &format!("{name}[{i}]")));
        }
    }
    let size = items.len() as i64;
    if let Some(min) = s.min_items
        && size < min
    {
        r.errs.push(invalid(
            name,
            &size.to_string(),
            &format!("{name} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = s.max_items
        && size > max
    {
        r.errs.push(gofmt::too_many(&field_of(name), size, max));
    }
    if s.unique_items {
        let dup = items
            .iter()
            .enumerate()
            .any(|(i, a)| items[..i].iter().any(|b| go_deep_equal(a, b)));
        if dup {
            r.errs.push(invalid(
                name,
                "\"\"",
                &format!("{name} in body shouldn't contain duplicates"),
            ));
        }
    }
    r.matches += 1;
    r
}

/// Go's `reflect.DeepEqual` of two values as upstream decodes them (`int64` and `float64` are
/// different types).
fn go_deep_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            (None, None) => x.as_f64() == y.as_f64(),
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| go_deep_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| go_deep_equal(v, w)))
        }
        _ => a == b,
    }
}

/// kube-openapi's `basicCommonValidator`: the value must equal one of the `enum` values. Enum
/// values come from the CRD through `encoding/json`, so their numbers are `float64`: a number
/// matches by value, while numbers nested in objects and arrays must be floats there too.
fn enum_check(s: &Structural, data: &Value, name: &str) -> Option<FieldError> {
    let values = s.enum_.as_ref().filter(|e| !e.is_empty())?;
    let matched = !data.is_null()
        && values.iter().any(|e| match (data, e) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            _ => go_deep_equal(data, &floats_everywhere(e)),
        });
    if matched {
        return None;
    }
    let supported: Vec<String> = values
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => serde_json::to_string(other).unwrap_or_default(),
        })
        .collect();
    Some(gofmt::not_supported(
        &field_of(name),
        &bad_value(data),
        &supported,
    ))
}

/// `v` with every number made a float, as `encoding/json` decodes an enum value.
fn floats_everywhere(v: &Value) -> Value {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) if (i as f64) as i64 == i => serde_json::Number::from_f64(i as f64)
                .map(Value::Number)
                .unwrap_or_else(|| v.clone()),
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(floats_everywhere).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), floats_everywhere(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// kube-openapi's `objectValidator`.
fn object_check(s: &Structural, o: &Map<String, Value>, name: &str) -> Res {
    let mut r = Res::default();
    let n = o.len() as i64;
    if let Some(min) = s.min_properties
        && n < min
    {
        r.errs.push(invalid(
            name,
            &n.to_string(),
            &format!("{name} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = s.max_properties
        && n > max
    {
        r.errs.push(gofmt::too_many(&field_of(name), n, max));
    }
    match &s.additional_properties {
        Some(AdditionalProperties::Bool(false)) => {
            for k in o.keys() {
                if !s.properties.contains_key(k) {
                    r.errs.push(invalid(
                        name,
                        &quote(k),
                        &format!("{name}.{k} in body is a forbidden property"),
                    ));
                }
            }
        }
        Some(AdditionalProperties::Schema(add)) => {
            for (k, v) in o {
                if !s.properties.contains_key(k) {
                    r.merge(node(add, v, &format!("{name}.{k}")));
                }
            }
        }
        _ => {}
    }
    for (p, ps) in &s.properties {
        if let Some(v) = o.get(p) {
            let child = if name.is_empty() {
                p.clone()
            } else {
                format!("{name}.{p}")
            };
            r.merge(node(ps, v, &child));
        }
    }
    for k in &s.required {
        if !o.contains_key(k) {
            r.errs
                .push(gofmt::required(&field_of(&format!("{name}.{k}")), ""));
        }
    }
    r
}

// ---- listtype: uniqueness of `set` and `map` lists ----

/// A `field.Path` child in upstream's printing: `a.b`, or `b` at the root.
pub(super) fn child(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_owned()
    } else {
        format!("{path}.{k}")
    }
}

fn list_sets_and_maps_object(
    errs: &mut Vec<FieldError>,
    path: &str,
    s: &Structural,
    o: &Map<String, Value>,
) {
    if let Some(add) = s.additional_schema() {
        for (k, v) in o {
            list_sets_and_maps(errs, &format!("{path}[{k}]"), add, v);
        }
    }
    for (k, v) in o {
        if let Some(sub) = s.properties.get(k) {
            list_sets_and_maps(errs, &child(path, k), sub, v);
        }
    }
}

fn list_sets_and_maps(errs: &mut Vec<FieldError>, path: &str, s: &Structural, v: &Value) {
    match v {
        Value::Object(o) => list_sets_and_maps_object(errs, path, s, o),
        Value::Array(a) => {
            match s.x_list_type.as_deref() {
                Some("set") => {
                    for i in non_unique(a) {
                        errs.push(duplicate(&format!("{path}[{i}]"), &a[i]));
                    }
                }
                Some("map") => list_map(errs, path, s, a),
                _ => {}
            }
            if let Some(items) = &s.items {
                for (i, x) in a.iter().enumerate() {
                    list_sets_and_maps(errs, &format!("{path}[{i}]"), items, x);
                }
            }
        }
        _ => {}
    }
}

fn duplicate(field: &str, v: &Value) -> FieldError {
    FieldError {
        reason: "FieldValueDuplicate",
        field: field.to_owned(),
        message: format!("Duplicate value: {}", bad_value(v)),
    }
}

/// The index of each second occurrence of a value (upstream's `validateListSet`).
fn non_unique(items: &[Value]) -> Vec<usize> {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (i, x) in items.iter().enumerate() {
        let times = seen.entry(identity(x)).or_insert(0);
        *times += 1;
        if *times == 2 {
            out.push(i);
        }
    }
    out
}

/// A canonical text telling values apart as upstream does (`int64` 1 and `float64` 1 differ).
fn identity(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => format!("i{i}"),
            None => format!("f{}", n.as_f64().unwrap_or(0.0)),
        },
        Value::Array(a) => format!("[{}]", a.iter().map(identity).collect::<Vec<_>>().join(",")),
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", quote(k), identity(&o[k.as_str()])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        other => other.to_string(),
    }
}

fn list_map(errs: &mut Vec<FieldError>, path: &str, s: &Structural, a: &[Value]) {
    for (i, x) in a.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            errs.push(gofmt::invalid(
                &format!("{path}[{i}]"),
                &bad_value(x),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if a.len() <= 1 {
        return;
    }
    let keys: Vec<Value> = a
        .iter()
        .map(|x| {
            let mut key = Map::new();
            if let Value::Object(o) = x {
                for k in &s.x_list_map_keys {
                    if let Some(v) = o.get(k) {
                        key.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    for i in non_unique(&keys) {
        errs.push(duplicate(&format!("{path}[{i}]"), &keys[i]));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::Structural;
    use super::validate;

    #[allow(clippy::needless_pass_by_value)]
    fn errs(schema: Value, obj: Value) -> Vec<String> {
        validate(&Structural::new(&schema), &obj)
            .into_iter()
            .map(|e| format!("{} {}: {}", e.reason, e.field, e.message))
            .collect()
    }

    #[allow(clippy::needless_pass_by_value)]
    fn spec(props: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}})
    }

    #[test]
    fn messages_match_upstream() {
        let cases: Vec<(Value, Value, Vec<&str>)> = vec![
            (
                spec(json!({"size": {"type": "integer"}})),
                json!({"spec": {"size": "big"}}),
                vec![
                    r#"FieldValueTypeInvalid spec.size: Invalid value: "string": spec.size in body must be of type integer: "string""#,
                ],
            ),
            (
                spec(json!({"size": {"type": "integer"}})),
                json!({"spec": {"size": 3.0}}),
                vec![],
            ),
            (
                spec(json!({"size": {"type": "integer", "minimum": 1, "maximum": 10}})),
                json!({"spec": {"size": 0}}),
                vec![
                    "FieldValueInvalid spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
                ],
            ),
            (
                spec(json!({"size": {"type": "number", "maximum": 1.5, "exclusiveMaximum": true}})),
                json!({"spec": {"size": 1.5}}),
                vec![
                    "FieldValueInvalid spec.size: Invalid value: 1.5: spec.size in body should be less than 1.5",
                ],
            ),
            (
                spec(json!({"n": {"type": "integer", "multipleOf": 5}})),
                json!({"spec": {"n": 7}}),
                vec![
                    "FieldValueInvalid spec.n: Invalid value: 7: spec.n in body should be a multiple of 5",
                ],
            ),
            (
                spec(json!({"mode": {"type": "string", "enum": ["a", "b"]}})),
                json!({"spec": {"mode": "x"}}),
                vec![
                    r#"FieldValueNotSupported spec.mode: Unsupported value: "x": supported values: "a", "b""#,
                ],
            ),
            (
                spec(json!({"n": {"type": "integer", "enum": [1, 2]}})),
                json!({"spec": {"n": 2}}),
                vec![],
            ),
            (
                spec(json!({"n": {"type": "integer", "enum": [1, 2]}})),
                json!({"spec": {"n": 3}}),
                vec![
                    r#"FieldValueNotSupported spec.n: Unsupported value: 3: supported values: "1", "2""#,
                ],
            ),
            (
                spec(json!({"name": {"type": "string", "maxLength": 3}})),
                json!({"spec": {"name": "abcd"}}),
                vec!["FieldValueTooLong spec.name: Too long: may not be more than 3 bytes"],
            ),
            (
                spec(json!({"name": {"type": "string", "minLength": 2}})),
                json!({"spec": {"name": "é"}}),
                vec![
                    r#"FieldValueInvalid spec.name: Invalid value: "é": spec.name in body should be at least 2 chars long"#,
                ],
            ),
            (
                spec(json!({"name": {"type": "string", "maxLength": 2}})),
                json!({"spec": {"name": "éé"}}),
                vec![],
            ),
            (
                spec(json!({"name": {"type": "string", "pattern": "^[a-z]+$"}})),
                json!({"spec": {"name": "A1"}}),
                vec![
                    r#"FieldValueInvalid spec.name: Invalid value: "A1": spec.name in body should match '^[a-z]+$'"#,
                ],
            ),
            (
                spec(json!({"id": {"type": "string", "format": "uuid"}})),
                json!({"spec": {"id": "nope"}}),
                vec![
                    r#"FieldValueTypeInvalid spec.id: Invalid value: "nope": spec.id in body must be of type uuid: "nope""#,
                ],
            ),
            (
                spec(json!({"n": {"type": "integer", "format": "int32"}})),
                json!({"spec": {"n": 99999999999i64}}),
                vec![],
            ),
            (
                spec(
                    json!({"items": {"type": "array", "items": {"type": "object",
                    "required": ["name"], "properties": {"name": {"type": "string"}}}}}),
                ),
                json!({"spec": {"items": [{"name": "a"}, {"name": "b"}, {"x": 1}]}}),
                vec!["FieldValueRequired spec.items[2].name: Required value"],
            ),
            (
                spec(json!({"l": {"type": "array", "items": {"type": "string"}, "minItems": 2}})),
                json!({"spec": {"l": ["a"]}}),
                vec![
                    "FieldValueInvalid spec.l: Invalid value: 1: spec.l in body should have at least 2 items",
                ],
            ),
            (
                spec(json!({"l": {"type": "array", "items": {"type": "string"}, "maxItems": 1}})),
                json!({"spec": {"l": ["a", "b"]}}),
                vec!["FieldValueTooMany spec.l: Too many: 2: must have at most 1 items"],
            ),
            (
                spec(json!({"m": {"type": "object", "maxProperties": 1,
                    "additionalProperties": {"type": "string"}}})),
                json!({"spec": {"m": {"a": "x", "b": 1}}}),
                vec![
                    "FieldValueTooMany spec.m: Too many: 2: must have at most 1 items",
                    r#"FieldValueTypeInvalid spec.m.b: Invalid value: "integer": spec.m.b in body must be of type string: "integer""#,
                ],
            ),
            (
                spec(json!({"s": {"type": "string"}})),
                json!({"spec": {"s": null}}),
                vec![
                    r#"FieldValueTypeInvalid spec.s: Invalid value: "null": spec.s in body must be of type string: "null""#,
                ],
            ),
            (
                spec(json!({"s": {"type": "string", "nullable": true}})),
                json!({"spec": {"s": null}}),
                vec![],
            ),
            (
                spec(json!({"port": {"x-kubernetes-int-or-string": true}})),
                json!({"spec": {"port": true}}),
                vec![
                    r#"FieldValueTypeInvalid spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#,
                ],
            ),
            (
                spec(json!({"port": {"x-kubernetes-int-or-string": true}})),
                json!({"spec": {"port": "http"}}),
                vec![],
            ),
            (
                spec(
                    json!({"v": {"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}]}}),
                ),
                json!({"spec": {"v": "c"}}),
                vec![
                    r#"FieldValueInvalid <nil>: Invalid value: "": "spec.v" must validate at least one schema (anyOf)"#,
                    r#"FieldValueInvalid spec.v: Invalid value: "c": spec.v in body should match '^a'"#,
                ],
            ),
            (
                spec(json!({"v": {"type": "string", "not": {"enum": ["x"]}}})),
                json!({"spec": {"v": "x"}}),
                vec![
                    r#"FieldValueInvalid <nil>: Invalid value: "": "spec.v" must not validate the schema (not)"#,
                ],
            ),
            (
                json!({"type": "object", "required": ["spec"],
                       "properties": {"spec": {"type": "object"}}}),
                json!({"apiVersion": "x/v1", "kind": "X"}),
                vec!["FieldValueRequired spec: Required value"],
            ),
            (
                spec(
                    json!({"tags": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}}),
                ),
                json!({"spec": {"tags": ["a", "a"]}}),
                vec![
                    r#"FieldValueInvalid spec.tags: Invalid value: "": spec.tags in body shouldn't contain duplicates"#,
                ],
            ),
        ];
        for (schema, obj, want) in cases {
            assert_eq!(errs(schema.clone(), obj.clone()), want, "{schema} {obj}");
        }
    }

    #[test]
    fn embedded_resources_need_api_version_and_kind() {
        let schema = spec(json!({"template": {"type": "object",
            "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}));
        assert_eq!(
            errs(
                schema.clone(),
                json!({"spec": {"template": {"metadata": {"name": "a/b"}}}})
            ),
            vec![
                "FieldValueRequired spec.template.apiVersion: Required value: must not be empty",
                "FieldValueRequired spec.template.kind: Required value: must not be empty",
                r#"FieldValueInvalid spec.template.metadata.name: Invalid value: "a/b": may not contain '/'"#,
            ]
        );
        assert_eq!(
            errs(
                schema,
                json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod"}}})
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn set_and_map_lists_must_be_unique() {
        let schema = spec(json!({
            "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "m": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"}}}}
        }));
        assert_eq!(
            errs(
                schema,
                json!({"spec": {"s": ["a", "b", "a", "a"], "m": [{"name": "x"}, {"name": "x"}]}})
            ),
            vec![
                r#"FieldValueDuplicate spec.m[1]: Duplicate value: map[string]interface {}{"name":"x"}"#,
                r#"FieldValueDuplicate spec.s[2]: Duplicate value: "a""#,
            ]
        );
    }
}
