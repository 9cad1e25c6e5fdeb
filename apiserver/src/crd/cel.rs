//! CRDs' CEL validation rules (`x-kubernetes-validations`), as upstream's
//! `apiextensions-apiserver/pkg/apiserver/schema/cel` (v1.33) does them, on the `cel`
//! interpreter with the Kubernetes CEL libraries of `kube-cel`:
//!
//! - [`compile_errors`] — when a CRD is created or updated: every rule and
//!   `messageExpression` parses, references only `self`/`oldSelf` (and macro variables),
//!   `oldSelf` is not used below a list that cannot be correlated, `fieldPath` names a field of
//!   the schema, and the estimated cost stays within upstream's per-rule and per-schema limits.
//! - [`Rules`] — the rules of one version's schema compiled once per CRD change.
//! - [`Rules::validate`] — a custom resource's rules evaluated at their schema nodes, with
//!   `oldSelf` on update (transition rules are skipped on create unless `optionalOldSelf`),
//!   failures reported with upstream's field paths, reasons and messages, under upstream's
//!   runtime cost budget.
//!
//! `cel` only parses: there is no type checker, so a rule upstream refuses for its types
//! (`self.noSuchField`, `1 + 'a'`) is accepted here and fails when it is evaluated.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube_cel::KubeCelExt;
use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use kube_cel::cel::objects::{Key, OptionalValue};
use kube_cel::cel::{Context, ExecutionError, Program, Value as Cel};
use serde_json::{Map, Value};

use super::schema::{AdditionalProperties, Structural};
use crate::error::FieldError;

/// Upstream's limit on one rule's estimated cost (`StaticEstimatedCostLimit`).
const RULE_COST_LIMIT: f64 = 10_000_000.0;
/// Upstream's limit on the estimated cost of every rule of a schema
/// (`StaticEstimatedCRDCostLimit`).
const SCHEMA_COST_LIMIT: f64 = 100_000_000.0;
/// Upstream's runtime budget for validating one object (`RuntimeCELCostBudget`).
const RUNTIME_BUDGET: f64 = 10_000_000.0;
/// The largest request body upstream accepts, which bounds unbounded lists and strings.
const MAX_REQUEST_BYTES: f64 = 3_145_728.0;
/// Upstream's `MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// One rule as written in the schema.
#[derive(Debug, Clone, Default)]
struct Spec {
    rule: String,
    message: String,
    message_expression: String,
    reason: Option<String>,
    field_path: String,
    optional_old_self: Option<bool>,
}

impl Spec {
    fn new(v: &Value) -> Spec {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Spec {
            rule: s("rule"),
            message: s("message"),
            message_expression: s("messageExpression"),
            reason: v.get("reason").and_then(Value::as_str).map(str::to_owned),
            field_path: s("fieldPath"),
            optional_old_self: v.get("optionalOldSelf").and_then(Value::as_bool),
        }
    }

    /// Go's `%#v` of the internal `apiextensions.ValidationRule`, the bad value upstream
    /// prints for a rule that does not compile.
    fn go_value(&self) -> String {
        let reason = match &self.reason {
            Some(_) => "(*apiextensions.FieldValueErrorReason)(0xc000000000)",
            None => "(*apiextensions.FieldValueErrorReason)(nil)",
        };
        let optional = match self.optional_old_self {
            Some(_) => "(*bool)(0xc000000000)",
            None => "(*bool)(nil)",
        };
        format!(
            "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
            go_quote(&self.rule),
            go_quote(&self.message),
            go_quote(&self.message_expression),
            go_quote(&self.field_path),
        )
    }

    /// Upstream's `ruleErrorString`: the message if set, else the rule.
    fn error_string(&self) -> &str {
        if self.message.is_empty() {
            self.rule.trim()
        } else {
            self.message.trim()
        }
    }
}

/// A compiled rule.
#[derive(Debug)]
struct Compiled {
    spec: Spec,
    program: Option<Program>,
    message: Option<Program>,
    transition: bool,
}

/// The compiled rules of one schema tree: those at this node and those below it.
#[derive(Debug, Default)]
pub struct Rules {
    here: Vec<Compiled>,
    properties: BTreeMap<String, Rules>,
    items: Option<Box<Rules>>,
    additional: Option<Box<Rules>>,
}

impl Rules {
    /// Compiles every rule of `schema` (rules that do not compile are kept as such and reported
    /// when evaluated, as upstream); `None` when the schema has no rules at all.
    pub fn new(schema: &Structural) -> Option<Rules> {
        let here: Vec<Compiled> = schema
            .x_validations
            .iter()
            .map(|v| {
                let spec = Spec::new(v);
                let program = Program::compile(&spec.rule).ok();
                let transition = program
                    .as_ref()
                    .is_some_and(|p| p.references().has_variable("oldSelf"));
                let message = (!spec.message_expression.trim().is_empty())
                    .then(|| Program::compile(&spec.message_expression).ok())
                    .flatten();
                Compiled {
                    spec,
                    program,
                    message,
                    transition,
                }
            })
            .collect();
        let properties: BTreeMap<String, Rules> = schema
            .properties
            .iter()
            .filter_map(|(k, s)| Some((k.clone(), Rules::new(s)?)))
            .collect();
        let items = schema.items.as_deref().and_then(Rules::new).map(Box::new);
        let additional = match &schema.additional_properties {
            Some(AdditionalProperties::Schema(s)) => Rules::new(s).map(Box::new),
            _ => None,
        };
        if here.is_empty() && properties.is_empty() && items.is_none() && additional.is_none() {
            return None;
        }
        Some(Rules {
            here,
            properties,
            items,
            additional,
        })
    }

    /// Evaluates the rules against custom resource `obj` (and `old` on update): the field
    /// errors upstream answers with.
    pub fn validate(
        &self,
        schema: &Structural,
        obj: &Value,
        old: Option<&Value>,
    ) -> Vec<FieldError> {
        let ctx = Context::default().with_all();
        let mut run = Run {
            ctx: &ctx,
            budget: RUNTIME_BUDGET,
            errs: Vec::new(),
        };
        run.node(self, schema, obj, old, "");
        run.errs
    }
}

/// One validation of an object: the shared context, the remaining budget, the errors so far.
struct Run<'a> {
    ctx: &'a Context<'a>,
    budget: f64,
    errs: Vec<FieldError>,
}

impl Run<'_> {
    /// Validates `value` at `path` against the rules of its schema node and those below.
    fn node(
        &mut self,
        rules: &Rules,
        schema: &Structural,
        value: &Value,
        old: Option<&Value>,
        path: &str,
    ) -> bool {
        if value.is_null() {
            return true;
        }
        if !rules.here.is_empty() && !self.here(rules, schema, value, old, path) {
            return false;
        }
        match value {
            Value::Object(m) => {
                let old_m = old.and_then(Value::as_object);
                for (k, v) in m {
                    let old_v = old_m.and_then(|o| o.get(k));
                    if let (Some(r), Some(s)) = (rules.properties.get(k), schema.properties.get(k))
                    {
                        if !self.node(r, s, v, old_v, &child(path, k)) {
                            return false;
                        }
                    } else if let (Some(r), Some(AdditionalProperties::Schema(s))) =
                        (&rules.additional, &schema.additional_properties)
                        && !schema.properties.contains_key(k)
                        && !self.node(r, s, v, old_v, &format!("{path}[{k}]"))
                    {
                        return false;
                    }
                }
            }
            Value::Array(a) => {
                if let (Some(r), Some(s)) = (&rules.items, &schema.items) {
                    let old_a = old.and_then(Value::as_array);
                    for (i, v) in a.iter().enumerate() {
                        let old_v = old_a.and_then(|o| correlate(schema, v, o));
                        if !self.node(r, s, v, old_v, &format!("{path}[{i}]")) {
                            return false;
                        }
                    }
                }
            }
            _ => {}
        }
        true
    }

    /// Evaluates the rules at one node; false when the budget ran out.
    fn here(
        &mut self,
        rules: &Rules,
        schema: &Structural,
        value: &Value,
        old: Option<&Value>,
        path: &str,
    ) -> bool {
        let type_ = if schema.type_.is_empty() {
            "object"
        } else {
            schema.type_.as_str()
        };
        let shown = if path.is_empty() { "<nil>" } else { path };
        if self.budget <= 0.0 {
            self.errs.push(invalid(
                shown,
                type_,
                "validation failed due to running out of cost budget, no further validation rules will be run",
            ));
            return false;
        }
        let this = to_cel(schema, value);
        let before = old.map(|o| to_cel(schema, o));
        for c in &rules.here {
            let Some(program) = &c.program else {
                self.errs.push(invalid(
                    shown,
                    type_,
                    &format!("rule compile error: compilation failed: {}", c.spec.rule),
                ));
                continue;
            };
            let optional = c.spec.optional_old_self == Some(true);
            if c.transition && before.is_none() && !optional {
                continue;
            }
            let mut scope = self.ctx.new_inner_scope();
            scope.add_variable_from_value("self", this.clone());
            if c.transition {
                let old_value = match (&before, optional) {
                    (Some(b), true) => Cel::Opaque(Arc::new(OptionalValue::of(b.clone()))),
                    (None, _) => Cel::Opaque(Arc::new(OptionalValue::none())),
                    (Some(b), false) => b.clone(),
                };
                scope.add_variable_from_value("oldSelf", old_value);
            }
            let cost = runtime_cost(&program.expression().expr, value);
            if cost > self.budget {
                self.errs.push(invalid(
                    shown,
                    type_,
                    "validation failed due to running out of cost budget, no further validation rules will be run",
                ));
                self.budget = -1.0;
                return false;
            }
            self.budget -= cost;
            let result = program.execute(&scope);
            let spec = &c.spec;
            match result {
                Ok(Cel::Bool(true)) => {}
                Err(e) => {
                    let msg = match &e {
                        ExecutionError::NoSuchOverload => format!(
                            "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {}",
                            spec.error_string()
                        ),
                        _ => format!("{} evaluating rule: {}", go_error(&e), spec.error_string()),
                    };
                    self.errs.push(invalid(shown, type_, &msg));
                }
                Ok(_) => {
                    let at = match field_path(schema, &spec.field_path) {
                        Some(p) if !p.is_empty() => {
                            if path.is_empty() {
                                p
                            } else {
                                format!("{path}.{p}")
                            }
                        }
                        _ => shown.to_owned(),
                    };
                    let message = match &c.message {
                        Some(m) => match m.execute(&scope) {
                            Ok(Cel::String(s))
                                if !s.trim().is_empty()
                                    && s.trim().len() <= MAX_MESSAGE_BYTES
                                    && !s.trim().contains('\n') =>
                            {
                                s.trim().to_owned()
                            }
                            _ => default_message(spec),
                        },
                        None => default_message(spec),
                    };
                    self.errs
                        .push(for_reason(&at, type_, &message, spec.reason.as_deref()));
                }
            }
        }
        true
    }
}

/// Upstream's `ruleMessageOrDefault`.
fn default_message(spec: &Spec) -> String {
    if spec.message.is_empty() {
        format!("failed rule: {}", spec.error_string())
    } else {
        spec.message.trim().to_owned()
    }
}

/// The old item an item of a `x-kubernetes-list-type: map` list is compared with: the one
/// with the same keys (other lists are not correlatable).
fn correlate<'a>(schema: &Structural, item: &Value, old: &'a [Value]) -> Option<&'a Value> {
    if schema.x_list_type.as_deref() != Some("map") || schema.x_list_map_keys.is_empty() {
        return None;
    }
    let keys = &schema.x_list_map_keys;
    old.iter()
        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
}

fn child(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_owned()
    } else {
        format!("{path}.{k}")
    }
}

/// The field error for a failed rule with `reason` (upstream's `fieldErrorForReason`).
fn for_reason(path: &str, type_: &str, detail: &str, reason: Option<&str>) -> FieldError {
    match reason {
        Some("FieldValueForbidden") => FieldError {
            reason: "FieldValueForbidden",
            field: path.into(),
            message: format!("Forbidden: {detail}"),
        },
        Some("FieldValueRequired") => FieldError {
            reason: "FieldValueRequired",
            field: path.into(),
            message: format!("Required value: {detail}"),
        },
        Some("FieldValueDuplicate") => FieldError {
            reason: "FieldValueDuplicate",
            field: path.into(),
            message: format!("Duplicate value: {}", go_quote(type_)),
        },
        _ => invalid(path, type_, detail),
    }
}

fn invalid(path: &str, type_: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: path.into(),
        message: format!("Invalid value: {}: {detail}", go_quote(type_)),
    }
}

/// cel-go's text for the runtime errors whose text rules and tests see most (shared with
/// the admission policies).
pub(crate) fn go_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {}", cel_text(i)),
        other => {
            let s = other.to_string();
            let mut c = s.chars();
            match c.next() {
                Some(f) => f.to_lowercase().chain(c).collect(),
                None => s,
            }
        }
    }
}

fn cel_text(v: &Cel) -> String {
    match v {
        Cel::Int(i) => i.to_string(),
        Cel::UInt(u) => u.to_string(),
        Cel::String(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}

/// Go's `strconv.Quote`, enough for rule text.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------------------------
// Values: a JSON value as CEL sees it through its schema (upstream's `UnstructuredToVal`).

/// CEL's reserved words, escaped in property names as upstream does.
const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property name as CEL expressions spell it (`my-field` is `my__dash__field`).
pub fn escape(name: &str) -> String {
    if RESERVED.contains(&name) {
        return format!("__{name}__");
    }
    let mut out = String::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `value` converted to a CEL value as its schema types it: `format: date-time` strings are
/// timestamps, `format: duration` strings durations, `number`s doubles, property names of
/// objects escaped (map keys are not).
fn to_cel(schema: &Structural, value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            if schema.type_ == "number" {
                Cel::Float(n.as_f64().unwrap_or(0.0))
            } else if let Some(i) = n.as_i64() {
                Cel::Int(i)
            } else if let Some(u) = n.as_u64() {
                Cel::UInt(u)
            } else {
                Cel::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => match (schema.type_.as_str(), schema.format.as_str()) {
            ("string", "date-time") => convert("timestamp", s),
            ("string", "duration") => convert("duration", s),
            _ => Cel::String(Arc::new(s.clone())),
        },
        Value::Array(a) => {
            let items = schema.items.as_deref();
            let fallback = Structural::default();
            Cel::List(Arc::new(
                a.iter()
                    .map(|v| to_cel(items.unwrap_or(&fallback), v))
                    .collect(),
            ))
        }
        Value::Object(m) => Cel::Map(object(schema, m).into()),
    }
}

/// `value` converted to a CEL value without a schema, as admission policies see objects:
/// integers are `int` (`uint` only past `i64`), other numbers `double`, property names kept
/// as written (no escaping).
pub(crate) fn plain_to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Cel::Int(i)
            } else if let Some(u) = n.as_u64() {
                Cel::UInt(u)
            } else {
                Cel::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(plain_to_cel).collect())),
        Value::Object(m) => Cel::Map(
            m.iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), plain_to_cel(v)))
                .collect::<std::collections::HashMap<Key, Cel>>()
                .into(),
        ),
    }
}

fn object(schema: &Structural, m: &Map<String, Value>) -> std::collections::HashMap<Key, Cel> {
    let fallback = Structural::default();
    let is_map = schema.properties.is_empty()
        && matches!(
            schema.additional_properties,
            Some(AdditionalProperties::Schema(_)) | Some(AdditionalProperties::Bool(true))
        );
    let mut out = std::collections::HashMap::new();
    for (k, v) in m {
        let (name, sub) = if let Some(s) = schema.properties.get(k) {
            (escape(k), s)
        } else if let Some(AdditionalProperties::Schema(s)) = &schema.additional_properties {
            (k.clone(), s.as_ref())
        } else if is_map || schema.x_preserve_unknown_fields || schema.x_embedded_resource {
            (k.clone(), &fallback)
        } else {
            continue;
        };
        out.insert(Key::String(Arc::new(name)), to_cel(sub, v));
    }
    out
}

/// `timestamp(s)` / `duration(s)` evaluated by CEL itself; the string when it does not parse.
fn convert(func: &str, s: &str) -> Cel {
    let fallback = Cel::String(Arc::new(s.to_owned()));
    let Ok(program) = Program::compile(&format!("{func}(v)")) else {
        return fallback;
    };
    let mut ctx = Context::default();
    ctx.add_variable_from_value("v", s.to_owned());
    program.execute(&ctx).unwrap_or(fallback)
}

// ---------------------------------------------------------------------------------------------
// fieldPath (upstream's `ValidFieldPath`).

/// The field path `json_path` (`.spec.x`, `.labels['a.b']`) names under `schema`, as a field
/// path string (`spec.x`, `labels[a.b]`), or `None` when it does not name a field.
fn field_path(schema: &Structural, json_path: &str) -> Option<String> {
    field_path_checked(schema, json_path).ok()
}

fn field_path_checked(schema: &Structural, json_path: &str) -> Result<String, String> {
    fn step<'a>(
        node: &'a Structural,
        name: &str,
        out: &mut String,
    ) -> Result<&'a Structural, String> {
        if !node.properties.is_empty() {
            let s = node
                .properties
                .get(name)
                .ok_or("does not refer to a valid field")?;
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
            Ok(s)
        } else if let Some(AdditionalProperties::Schema(s)) = &node.additional_properties {
            out.push_str(&format!("[{name}]"));
            Ok(s)
        } else {
            Err("does not refer to a valid field".into())
        }
    }
    let mut out = String::new();
    let mut node = schema;
    let mut rest = json_path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err("unexpected end of JSON path".into());
            }
            node = step(node, &r[..end], &mut out)?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or("expected ] but got end")?;
            let name = r[..end].replace("\\'", "'").replace("\\\\", "\\");
            node = step(node, &name, &mut out)?;
            rest = &r[end + 2..];
        } else {
            return Err(format!("expected [ or . but got: {rest}"));
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Compilation errors, for the CRD's validation.

/// The errors upstream reports for the `x-kubernetes-validations` of a CRD's schema, at `at`
/// (e.g. `spec.validation` or `spec.versions[0].schema`): rules and messageExpressions that do
/// not compile, fieldPaths that name no field, `oldSelf` below uncorrelatable lists, and
/// estimated costs over upstream's limits.
pub fn compile_errors(schema: &Value, at: &str) -> Vec<FieldError> {
    let structural = Structural::new(schema);
    let mut c = Check {
        errs: Vec::new(),
        costs: Vec::new(),
    };
    c.node(&structural, &format!("{at}.openAPIV3Schema"), None, 1.0);
    let total: f64 = c.costs.iter().map(|(_, cost)| cost).sum();
    if total > SCHEMA_COST_LIMIT {
        for (path, _) in &c.costs {
            c.errs.push(forbidden(
                path,
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        c.errs.push(forbidden(
            &format!("{at}.openAPIV3Schema"),
            &cost_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total,
                SCHEMA_COST_LIMIT,
            ),
        ));
    }
    c.errs
}

struct Check {
    errs: Vec<FieldError>,
    costs: Vec<(String, f64)>,
}

impl Check {
    /// Checks the rules at `schema` (at schema path `path`), then below it; `uncorrelatable`
    /// is the path of the nearest enclosing list that is not a map list, `cardinality` how
    /// many times this node can occur in one object.
    fn node(
        &mut self,
        schema: &Structural,
        path: &str,
        uncorrelatable: Option<&str>,
        cardinality: f64,
    ) {
        for (i, raw) in schema.x_validations.iter().enumerate() {
            self.rule(
                schema,
                raw,
                &format!("{path}.x-kubernetes-validations[{i}]"),
                uncorrelatable,
                cardinality,
            );
        }
        for (k, s) in &schema.properties {
            self.node(
                s,
                &format!("{path}.properties[{k}]"),
                uncorrelatable,
                cardinality,
            );
        }
        if let Some(items) = &schema.items {
            let inner = if schema.x_list_type.as_deref() == Some("map") {
                uncorrelatable
            } else {
                uncorrelatable.or(Some(path))
            };
            let n = cardinality * max_len(schema, items);
            self.node(items, &format!("{path}.items"), inner, n);
        }
        if let Some(AdditionalProperties::Schema(s)) = &schema.additional_properties {
            let n = cardinality * max_len(schema, s);
            self.node(
                s,
                &format!("{path}.additionalProperties"),
                uncorrelatable,
                n,
            );
        }
    }

    fn rule(
        &mut self,
        schema: &Structural,
        raw: &Value,
        path: &str,
        uncorrelatable: Option<&str>,
        cardinality: f64,
    ) {
        let spec = Spec::new(raw);
        if spec.rule.trim().is_empty() {
            return;
        }
        match Program::compile(&spec.rule) {
            Err(e) => self.errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: format!("{path}.rule"),
                message: format!(
                    "Invalid value: {}: compilation failed: {}",
                    spec.go_value(),
                    go_issues(&e.to_string())
                ),
            }),
            Ok(p) => {
                let expr = &p.expression().expr;
                let detail = undeclared(expr, &spec.rule)
                    .map(|d| format!("compilation failed: {d}"))
                    .or_else(|| {
                        (!may_be(expr, Kind::Bool))
                            .then(|| "cel expression must evaluate to a bool".to_owned())
                    });
                if let Some(d) = detail {
                    self.errs.push(FieldError {
                        reason: "FieldValueInvalid",
                        field: format!("{path}.rule"),
                        message: format!("Invalid value: {}: {d}", spec.go_value()),
                    });
                }
                let cost = estimate(expr, schema, &Scope::default()) * cardinality;
                if cost > RULE_COST_LIMIT {
                    self.errs.push(forbidden(
                        &format!("{path}.rule"),
                        &cost_message("estimated rule cost", cost, RULE_COST_LIMIT),
                    ));
                }
                self.costs.push((format!("{path}.rule"), cost));
                if p.references().has_variable("oldSelf")
                    && let Some(list) = uncorrelatable
                {
                    self.errs.push(FieldError {
                        reason: "FieldValueInvalid",
                        field: format!("{path}.rule"),
                        message: format!(
                            "Invalid value: {}: oldSelf cannot be used on the uncorrelatable portion of the schema within {list}",
                            go_quote(&spec.rule)
                        ),
                    });
                }
            }
        }
        if !spec.message_expression.trim().is_empty() {
            let detail = match Program::compile(&spec.message_expression) {
                Err(e) => Some(format!(
                    "messageExpression compilation failed: {}",
                    go_issues(&e.to_string())
                )),
                Ok(p) => {
                    let expr = &p.expression().expr;
                    undeclared(expr, &spec.message_expression)
                        .map(|d| format!("messageExpression compilation failed: {d}"))
                        .or_else(|| {
                            (!may_be(expr, Kind::String))
                                .then(|| "must evaluate to a string".to_owned())
                        })
                }
            };
            if let Some(d) = detail {
                self.errs.push(FieldError {
                    reason: "FieldValueInvalid",
                    field: format!("{path}.messageExpression"),
                    message: format!("Invalid value: {}: {d}", spec.go_value()),
                });
            }
        }
        if !spec.field_path.trim().is_empty()
            && !spec.field_path.contains(['\n', '\r'])
            && field_path_checked(schema, &spec.field_path).is_err()
        {
            self.errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: format!("{path}.fieldPath"),
                message: format!(
                    "Invalid value: {}: fieldPath must be a valid path",
                    go_quote(&spec.field_path)
                ),
            });
        }
    }
}

fn forbidden(path: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueForbidden",
        field: path.into(),
        message: format!("Forbidden: {detail}"),
    }
}

/// Upstream's `getCostErrorMessage`.
fn cost_message(name: &str, cost: f64, limit: f64) -> String {
    let factor = cost / limit;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// cel-go's layout of parse issues (` | ` before the source line and the caret).
fn go_issues(s: &str) -> String {
    s.replace("\n| ", "\n | ")
}

/// The first identifier the expression uses that is neither `self`, `oldSelf` nor a macro
/// variable in scope, as cel-go reports it.
fn undeclared(expr: &Expr, source: &str) -> Option<String> {
    let mut bound = vec!["self".to_owned(), "oldSelf".to_owned()];
    let name = first_undeclared(expr, &mut bound)?;
    let (line, col) = position(source, &name);
    let text = source.lines().nth(line - 1).unwrap_or("");
    Some(format!(
        "ERROR: <input>:{line}:{col}: undeclared reference to '{name}' (in container '')\n | {text}\n | {}^",
        ".".repeat(col - 1)
    ))
}

fn first_undeclared(e: &Expr, bound: &mut Vec<String>) -> Option<String> {
    match e {
        Expr::Ident(n) => (!n.starts_with('@') && !bound.contains(n)).then(|| n.clone()),
        Expr::Select(s) => first_undeclared(&s.operand.expr, bound),
        Expr::Call(c) => {
            if let Some(t) = &c.target
                && let Some(n) = first_undeclared(&t.expr, bound)
            {
                return Some(n);
            }
            c.args.iter().find_map(|a| first_undeclared(&a.expr, bound))
        }
        Expr::List(l) => l
            .elements
            .iter()
            .find_map(|a| first_undeclared(&a.expr, bound)),
        Expr::Map(m) => m.entries.iter().find_map(|en| match &en.expr {
            EntryExpr::MapEntry(me) => first_undeclared(&me.key.expr, bound)
                .or_else(|| first_undeclared(&me.value.expr, bound)),
            EntryExpr::StructField(f) => first_undeclared(&f.value.expr, bound),
        }),
        Expr::Comprehension(c) => {
            if let Some(n) = first_undeclared(&c.iter_range.expr, bound)
                .or_else(|| first_undeclared(&c.accu_init.expr, bound))
            {
                return Some(n);
            }
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            let found = [&c.loop_cond, &c.loop_step, &c.result]
                .iter()
                .find_map(|x| first_undeclared(&x.expr, bound));
            bound.truncate(depth);
            found
        }
        _ => None,
    }
}

/// Line and column (1-based) of the first whole-word occurrence of `name` in `source`.
fn position(source: &str, name: &str) -> (usize, usize) {
    for (i, line) in source.lines().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find(name) {
            let start = from + at;
            let end = start + name.len();
            let word = |c: char| c.is_alphanumeric() || c == '_';
            let before = line[..start].chars().next_back().is_none_or(|c| !word(c));
            let after = line[end..].chars().next().is_none_or(|c| !word(c));
            if before && after {
                return (i + 1, line[..start].chars().count() + 1);
            }
            from = end;
        }
    }
    (1, 1)
}

#[derive(PartialEq, Clone, Copy)]
enum Kind {
    Bool,
    String,
}

/// Whether `e` may evaluate to a value of `kind` (false only when its type is certain).
fn may_be(e: &Expr, kind: Kind) -> bool {
    match e {
        Expr::Literal(l) => matches!(
            (l, kind),
            (LiteralValue::Boolean(_), Kind::Bool) | (LiteralValue::String(_), Kind::String)
        ),
        Expr::List(_) | Expr::Map(_) => false,
        Expr::Call(c) => match c.func_name.as_str() {
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "_&&_" | "_||_" | "!_" | "@in"
            | "has" | "startsWith" | "endsWith" | "matches" => kind == Kind::Bool,
            "size" | "_-_" | "_*_" | "_/_" | "_%_" | "-_" | "int" | "uint" | "double" => false,
            "string" | "_+_" => kind == Kind::String,
            "_?_:_" => c.args.iter().skip(1).any(|a| may_be(&a.expr, kind)),
            _ => true,
        },
        _ => true,
    }
}

// ---------------------------------------------------------------------------------------------
// Cost: a coarse version of cel-go's estimator (sizes from maxItems/maxLength/maxProperties or,
// when unbounded, from the largest request), and a runtime count from the actual sizes.

/// What is known of the identifiers a sub-expression can see.
#[derive(Default, Clone)]
struct Scope<'a> {
    vars: Vec<(String, Option<&'a Structural>)>,
}

/// The largest number of items (or properties) `parent` can hold of `item`.
fn max_len(parent: &Structural, item: &Structural) -> f64 {
    if let Some(n) = parent.max_items.or(parent.max_properties) {
        return n.max(0) as f64;
    }
    // The smallest serialized item, plus its separator: `"",`, `{},`, `0,`.
    let min_item = match item.type_.as_str() {
        "integer" | "number" => 2.0,
        "boolean" => 5.0,
        _ => 3.0,
    };
    (MAX_REQUEST_BYTES / min_item).floor()
}

/// The largest size of a value of `schema` (items, properties or characters).
fn max_size(schema: &Structural) -> f64 {
    match schema.type_.as_str() {
        "array" => schema
            .items
            .as_deref()
            .map_or(MAX_REQUEST_BYTES / 3.0, |i| max_len(schema, i)),
        "object" => match &schema.additional_properties {
            Some(AdditionalProperties::Schema(s)) => max_len(schema, s),
            _ => schema.properties.len().max(1) as f64,
        },
        "string" => schema
            .max_length
            .map_or(MAX_REQUEST_BYTES - 2.0, |n| n.max(0) as f64),
        _ => 1.0,
    }
}

/// The schema the value of `e` has, where it can be told.
fn shape<'a>(e: &Expr, self_: &'a Structural, scope: &Scope<'a>) -> Option<&'a Structural> {
    match e {
        Expr::Ident(n) if n == "self" || n == "oldSelf" => Some(self_),
        Expr::Ident(n) => scope
            .vars
            .iter()
            .rev()
            .find(|(v, _)| v == n)
            .and_then(|(_, s)| *s),
        Expr::Select(s) => {
            let parent = shape(&s.operand.expr, self_, scope)?;
            parent
                .properties
                .iter()
                .find(|(k, _)| escape(k) == s.field)
                .map(|(_, v)| v)
                .or(match &parent.additional_properties {
                    Some(AdditionalProperties::Schema(a)) => Some(a.as_ref()),
                    _ => None,
                })
        }
        Expr::Call(c) if c.func_name == "_[_]" => {
            let parent = shape(&c.args.first()?.expr, self_, scope)?;
            parent
                .items
                .as_deref()
                .or(match &parent.additional_properties {
                    Some(AdditionalProperties::Schema(a)) => Some(a.as_ref()),
                    _ => None,
                })
        }
        _ => None,
    }
}

/// The estimated worst-case cost of evaluating `e` at a node of schema `self_`.
fn estimate<'a>(e: &Expr, self_: &'a Structural, scope: &Scope<'a>) -> f64 {
    let size = |x: &IdedExpr| shape(&x.expr, self_, scope).map_or(1.0, max_size);
    match e {
        Expr::Ident(_) | Expr::Literal(_) => 1.0,
        Expr::Select(s) => 1.0 + estimate(&s.operand.expr, self_, scope),
        Expr::List(l) => {
            10.0 + l
                .elements
                .iter()
                .map(|x| estimate(&x.expr, self_, scope))
                .sum::<f64>()
        }
        Expr::Map(_) | Expr::Struct(_) => 30.0,
        Expr::Call(c) => {
            let inner: f64 = c
                .target
                .iter()
                .map(|t| estimate(&t.expr, self_, scope))
                .chain(c.args.iter().map(|a| estimate(&a.expr, self_, scope)))
                .sum();
            let strlen = |x: Option<&IdedExpr>| x.map_or(1.0, size);
            let own = match c.func_name.as_str() {
                "matches" | "find" | "findAll" => {
                    let target = c.target.as_deref().or(c.args.first());
                    1.0 + strlen(target) * 0.1 * 4.0
                }
                "contains" | "startsWith" | "endsWith" | "indexOf" | "lastIndexOf" | "split"
                | "replace" | "lowerAscii" | "upperAscii" | "trim" | "join" => {
                    let target = c.target.as_deref().or(c.args.first());
                    1.0 + strlen(target) * 0.1
                }
                "_==_" | "_!=_" | "_+_" | "@in" => {
                    1.0 + c.args.iter().map(|a| size(a) * 0.1).fold(0.0, f64::max)
                }
                _ => 1.0,
            };
            own + inner
        }
        Expr::Comprehension(comp) => {
            let range = shape(&comp.iter_range.expr, self_, scope);
            let n = range.map_or(1.0, max_size);
            let item = range.and_then(|r| {
                r.items.as_deref().or(match &r.additional_properties {
                    Some(AdditionalProperties::Schema(a)) => Some(a.as_ref()),
                    _ => None,
                })
            });
            let mut inner_scope = scope.clone();
            inner_scope.vars.push((comp.iter_var.clone(), item));
            let body = estimate(&comp.loop_cond.expr, self_, &inner_scope)
                + estimate(&comp.loop_step.expr, self_, &inner_scope);
            estimate(&comp.iter_range.expr, self_, scope)
                + estimate(&comp.accu_init.expr, self_, scope)
                + n * body
                + estimate(&comp.result.expr, self_, &inner_scope)
        }
        Expr::Unspecified => 0.0,
    }
}

/// A runtime cost of `e` against the actual `value`: the AST size, each comprehension's body
/// counted once per element of the largest list or map in the value.
fn runtime_cost(e: &Expr, value: &Value) -> f64 {
    fn largest(v: &Value) -> f64 {
        match v {
            Value::Array(a) => (a.len() as f64).max(a.iter().map(largest).fold(0.0, f64::max)),
            Value::Object(m) => (m.len() as f64).max(m.values().map(largest).fold(0.0, f64::max)),
            Value::String(s) => s.len() as f64 * 0.1,
            _ => 1.0,
        }
    }
    fn walk(e: &Expr, n: f64) -> f64 {
        match e {
            Expr::Select(s) => 1.0 + walk(&s.operand.expr, n),
            Expr::Call(c) => {
                1.0 + c.target.iter().map(|t| walk(&t.expr, n)).sum::<f64>()
                    + c.args.iter().map(|a| walk(&a.expr, n)).sum::<f64>()
            }
            Expr::List(l) => 1.0 + l.elements.iter().map(|x| walk(&x.expr, n)).sum::<f64>(),
            Expr::Comprehension(c) => {
                walk(&c.iter_range.expr, n)
                    + n * (walk(&c.loop_cond.expr, n) + walk(&c.loop_step.expr, n))
            }
            _ => 1.0,
        }
    }
    walk(e, largest(value).max(1.0))
}

#[cfg(test)]
// Table-style helpers take their JSON by value so cases read as literals.
#[allow(clippy::needless_pass_by_value, clippy::redundant_clone)]
mod tests {
    use serde_json::{Value, json};

    use super::{Rules, Structural, compile_errors, escape};

    fn schema(spec: Value) -> Value {
        json!({"type": "object", "properties": {"spec": spec}})
    }

    fn compile(spec: Value) -> Vec<String> {
        compile_errors(&schema(spec), "spec.validation")
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    fn run(spec: Value, obj: Value, old: Option<Value>) -> Vec<String> {
        let s = Structural::new(&schema(spec));
        let Some(rules) = Rules::new(&s) else {
            return Vec::new();
        };
        rules
            .validate(&s, &obj, old.as_ref())
            .into_iter()
            .map(|e| format!("{} {}: {}", e.reason, e.field, e.message))
            .collect()
    }

    fn replicas(rules: Value) -> Value {
        json!({"type": "object", "x-kubernetes-validations": rules,
               "properties": {"replicas": {"type": "integer"}, "name": {"type": "string", "maxLength": 10},
                              "my-field": {"type": "string", "maxLength": 10},
                              "start": {"type": "string", "format": "date-time"},
                              "timeout": {"type": "string", "format": "duration"}}})
    }

    #[test]
    fn rule_that_does_not_parse_is_refused_with_upstreams_path() {
        let errs = compile(replicas(json!([{"rule": "self.replicas >"}])));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with(
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"apiextensions.ValidationRule{Rule:\\\"self.replicas >\\\""
            ) || errs[0].starts_with(
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.replicas >\""
            ),
            "{errs:?}"
        );
        assert!(
            errs[0].contains(": compilation failed: ERROR: <input>:1:"),
            "{errs:?}"
        );
    }

    #[test]
    fn undeclared_references_and_non_bool_rules_are_refused() {
        let errs = compile(replicas(json!([
            {"rule": "foo > 1"},
            {"rule": "self.replicas + 1"},
            {"rule": "self.all(k, k != 'x')"},
            {"rule": "self.replicas > 0", "messageExpression": "bar"},
            {"rule": "self.replicas > 0", "messageExpression": "1"},
        ])));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].contains("compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')\n | foo > 1\n | ^"), "{errs:?}");
        assert!(
            errs[1].ends_with("cel expression must evaluate to a bool"),
            "{errs:?}"
        );
        assert!(errs[2].contains("x-kubernetes-validations[3].messageExpression: Invalid value: apiextensions.ValidationRule{"), "{errs:?}");
        assert!(errs[2].contains("messageExpression compilation failed: ERROR: <input>:1:1: undeclared reference to 'bar'"), "{errs:?}");
        assert!(errs[3].ends_with("must evaluate to a string"), "{errs:?}");
    }

    #[test]
    fn field_path_must_name_a_field() {
        let errs = compile(replicas(json!([
            {"rule": "self.replicas > 0", "fieldPath": ".replicas"},
            {"rule": "self.replicas > 0", "fieldPath": ".nope"},
        ])));
        assert_eq!(
            errs,
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].fieldPath: Invalid value: \".nope\": fieldPath must be a valid path"
            ]
        );
    }

    #[test]
    fn old_self_in_uncorrelatable_lists_is_refused() {
        let errs = compile(json!({"type": "array", "maxItems": 10,
            "items": {"type": "object", "properties": {"a": {"type": "integer"}},
                      "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}));
        assert_eq!(
            errs,
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[spec]"
            ]
        );
    }

    #[test]
    fn unbounded_lists_of_strings_exceed_the_cost_limit() {
        let rule = json!([{"rule": "self.all(x, x.matches('^[a-z]+$'))"}]);
        let errs = compile(
            json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-validations": rule}),
        );
        assert!(errs.iter().any(|e| e.ends_with(".x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)")), "{errs:?}");
        let errs = compile(
            json!({"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 64}, "x-kubernetes-validations": rule}),
        );
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn failing_rules_give_upstreams_field_errors() {
        let spec = replicas(json!([
            {"rule": "self.replicas >= 0"},
            {"rule": "self.replicas < 10", "message": "too many"},
            {"rule": "self.name.startsWith('a')", "messageExpression": "'name ' + self.name + ' must start with a'", "fieldPath": ".name", "reason": "FieldValueForbidden"},
        ]));
        let obj = json!({"spec": {"replicas": -1, "name": "bob"}});
        assert_eq!(
            run(spec.clone(), obj, None),
            vec![
                "FieldValueInvalid spec: Invalid value: \"object\": failed rule: self.replicas >= 0",
                "FieldValueForbidden spec.name: Forbidden: name bob must start with a",
            ]
        );
        assert_eq!(
            run(
                spec.clone(),
                json!({"spec": {"replicas": 20, "name": "al"}}),
                None
            ),
            vec!["FieldValueInvalid spec: Invalid value: \"object\": too many"]
        );
        assert!(run(spec, json!({"spec": {"replicas": 3, "name": "al"}}), None).is_empty());
    }

    #[test]
    fn transition_rules_run_on_update_only_unless_old_self_is_optional() {
        let spec = replicas(
            json!([{"rule": "self.replicas >= oldSelf.replicas", "message": "cannot shrink"}]),
        );
        assert!(run(spec.clone(), json!({"spec": {"replicas": 1}}), None).is_empty());
        assert!(
            run(
                spec.clone(),
                json!({"spec": {"replicas": 2}}),
                Some(json!({"spec": {"replicas": 1}}))
            )
            .is_empty()
        );
        assert_eq!(
            run(
                spec,
                json!({"spec": {"replicas": 1}}),
                Some(json!({"spec": {"replicas": 2}}))
            ),
            vec!["FieldValueInvalid spec: Invalid value: \"object\": cannot shrink"]
        );
        let optional = replicas(
            json!([{"rule": "!oldSelf.hasValue() || self.replicas >= oldSelf.value().replicas", "optionalOldSelf": true}]),
        );
        assert!(run(optional.clone(), json!({"spec": {"replicas": 1}}), None).is_empty());
        assert_eq!(
            run(
                optional,
                json!({"spec": {"replicas": 1}}),
                Some(json!({"spec": {"replicas": 2}}))
            )
            .len(),
            1
        );
    }

    #[test]
    fn kubernetes_libraries_formats_and_escaping() {
        let spec = replicas(json!([
            {"rule": "self.name.lowerAscii() == self.name"},
            {"rule": "self.my__dash__field == 'x'"},
            {"rule": "self.start < timestamp('2030-01-01T00:00:00Z')"},
            {"rule": "self.timeout <= duration('1h')"},
            {"rule": "isURL('https://example.com') && quantity('1Gi').isGreaterThan(quantity('1Mi'))"},
            {"rule": "['a', 'b'].all(x, x.size() == 1) && [1, 2].exists(x, x == 2) && [1, 2].map(x, x * 2) == [2, 4] && [1, 2, 3].filter(x, x > 1).size() == 2"},
            {"rule": "sets.contains([1, 2], [1]) && 'a-b'.split('-').size() == 2 && ip('10.0.0.1').family() == 4"},
        ]));
        let obj = json!({"spec": {"name": "abc", "my-field": "x", "start": "2024-01-01T00:00:00Z", "timeout": "30m"}});
        assert!(
            run(spec.clone(), obj, None).is_empty(),
            "{:?}",
            run(
                spec.clone(),
                json!({"spec": {"name": "abc", "my-field": "x", "start": "2024-01-01T00:00:00Z", "timeout": "30m"}}),
                None
            )
        );
        let bad = json!({"spec": {"name": "ABC", "my-field": "y", "start": "2040-01-01T00:00:00Z", "timeout": "2h"}});
        assert_eq!(run(spec, bad, None).len(), 4);
        assert_eq!(escape("a-b.c/d"), "a__dash__b__dot__c__slash__d");
        assert_eq!(escape("namespace"), "__namespace__");
    }

    #[test]
    fn runtime_errors_and_nested_nodes() {
        let spec = json!({"type": "object", "properties": {
            "items": {"type": "array", "maxItems": 5, "items": {"type": "object", "properties": {"v": {"type": "integer"}},
                      "x-kubernetes-validations": [{"rule": "self.v > 0"}]}},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 5,
                      "x-kubernetes-validations": [{"rule": "self != 'bad'"}]}},
            "div": {"type": "integer", "x-kubernetes-validations": [{"rule": "10 / self > 1"}]}}});
        let obj = json!({"spec": {"items": [{"v": 1}, {"v": 0}], "labels": {"a": "ok", "b": "bad"}, "div": 0}});
        assert_eq!(
            run(spec, obj, None),
            vec![
                "FieldValueInvalid spec.div: Invalid value: \"integer\": division by zero evaluating rule: 10 / self > 1",
                "FieldValueInvalid spec.items[1]: Invalid value: \"object\": failed rule: self.v > 0",
                "FieldValueInvalid spec.labels[b]: Invalid value: \"string\": failed rule: self != 'bad'",
            ]
        );
    }
}
