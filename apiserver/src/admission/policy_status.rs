//! `status` of ValidatingAdmissionPolicies, as upstream's ValidatingAdmissionPolicyStatus
//! controller (kube-controller-manager, `pkg/controller/validatingadmissionpolicystatus`)
//! writes it: for each policy whose `metadata.generation` is not yet
//! `status.observedGeneration`, its validation expressions and message expressions are
//! checked against the schemas of the kinds its `matchConstraints` name (upstream's
//! `typesToCheck`: rules without wildcards, main resources only, at most ten kinds), and
//! `status.typeChecking.expressionWarnings` lists what does not fit, with
//! `status.observedGeneration` set.
//!
//! The checker ([`check`]) follows the field selections on `object` and `oldObject` (and on
//! the items of lists they range over in macros such as `all` or `exists`) through the
//! kind's OpenAPI schema, the k8s-openapi types the server's own `/openapi` documents are
//! generated from: a field the schema does not have is upstream's `undefined field '<f>'`,
//! worded as cel-go prints its issues. It does not infer the types of other expressions
//! (no `found no matching overload` warnings) and skips custom resources.
//!
//! Runs in the API server (this server has no controller-manager of its own for it): one
//! task polling the policies every second, writing a status by compare-and-swap on the
//! policy's revision (a lost race is retried on the next pass).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use kube_cel::cel::Program;
use kube_cel::cel::common::ast::{EntryExpr, Expr};
use serde_json::{Map, Value, json};

use crate::storage::Storage;

/// Storage prefix of the policies.
const POLICIES: &str = "/registry/admissionregistration.k8s.io/validatingadmissionpolicies/";
/// Upstream's `maxTypesToCheck`.
const MAX_TYPES: usize = 10;
/// How often the policies are looked at.
const INTERVAL: Duration = Duration::from_secs(1);

/// Starts the status writer on the current tokio runtime (nothing outside one).
pub fn spawn(storage: Storage) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut seen = -1;
        loop {
            let revision = storage.current_revision();
            if revision != seen {
                match pass(&storage).await {
                    Ok(()) => seen = revision,
                    Err(err) => tracing::debug!(%err, "policy status pass failed"),
                }
            }
            tokio::time::sleep(INTERVAL).await;
        }
    });
}

/// One pass: the status of every policy not checked at its generation.
async fn pass(storage: &Storage) -> Result<(), crate::storage::Error> {
    let page = storage.list(POLICIES, None, 0, 0).await?;
    for (key, stored) in page.items {
        let Ok(mut policy) = serde_json::from_slice::<Value>(&stored.value) else {
            continue;
        };
        let generation = policy["metadata"]["generation"].as_i64().unwrap_or(1);
        if policy["status"]["observedGeneration"].as_i64() == Some(generation) {
            continue;
        }
        let warnings = check(&policy);
        let mut type_checking = Map::new();
        if !warnings.is_empty() {
            type_checking.insert("expressionWarnings".into(), Value::Array(warnings));
        }
        let status = json!({
            "observedGeneration": generation,
            "typeChecking": type_checking,
        });
        policy["status"] = status;
        let bytes = serde_json::to_vec(&policy).unwrap_or_default();
        match storage.update(&key, bytes, stored.revision).await {
            Ok(_) | Err(crate::storage::Error::Conflict | crate::storage::Error::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The `expressionWarnings` of `policy` (`[{fieldRef, warning}]`), empty when everything
/// checked fits or nothing could be checked.
pub fn check(policy: &Value) -> Vec<Value> {
    let kinds: Vec<(String, String, String, Arc<Schemas>)> = kinds_to_check(policy)
        .into_iter()
        .filter_map(|(g, v, k)| {
            let schemas = schemas_of(&g, &v, &k)?;
            Some((g, v, k, schemas))
        })
        .collect();
    if kinds.is_empty() {
        return Vec::new();
    }
    let mut warnings = Vec::new();
    let validations = policy["spec"]["validations"].as_array();
    for (i, v) in validations.into_iter().flatten().enumerate() {
        for field in ["expression", "messageExpression"] {
            let Some(source) = v[field].as_str().filter(|s| !s.is_empty()) else {
                continue;
            };
            let results: Vec<String> = kinds
                .iter()
                .filter_map(|(g, ver, k, schemas)| {
                    let issues = issues(source, schemas);
                    (!issues.is_empty()).then(|| format!("{g}/{ver}, Kind={k}: {issues}\n"))
                })
                .collect();
            if !results.is_empty() {
                warnings.push(json!({
                    "fieldRef": format!("spec.validations[{i}].{field}"),
                    "warning": results.join("\n"),
                }));
            }
        }
    }
    warnings
}

/// Upstream's `typesToCheck`: the kinds of the `matchConstraints` rules naming groups,
/// versions and resources without wildcards, sorted by group, version and kind.
fn kinds_to_check(policy: &Value) -> Vec<(String, String, String)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let mut out: Vec<(String, String, String)> = Vec::new();
    let rules = policy["spec"]["matchConstraints"]["resourceRules"].as_array();
    for rule in rules.into_iter().flatten() {
        let groups = strings(&rule["apiGroups"]);
        let versions = strings(&rule["apiVersions"]);
        if groups.iter().chain(&versions).any(|s| s.contains('*')) {
            continue;
        }
        let resources: Vec<String> = strings(&rule["resources"])
            .into_iter()
            .filter(|r| !r.contains(['*', '/']))
            .collect();
        for g in &groups {
            for v in &versions {
                for r in &resources {
                    let Some(info) = crate::registry::catalog::find(g, v, r) else {
                        continue;
                    };
                    let kind = (g.clone(), v.clone(), info.kind.to_owned());
                    if !out.contains(&kind) {
                        out.push(kind);
                    }
                    if out.len() == MAX_TYPES {
                        out.sort();
                        return out;
                    }
                }
            }
        }
    }
    out.sort();
    out
}

/// A kind's schema and every schema it references, by name.
struct Schemas {
    root: Value,
    definitions: Map<String, Value>,
}

impl Schemas {
    /// `schema` with its `$ref` followed (and `allOf: [ref]` wrappers).
    fn resolve<'a>(&'a self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..8 {
            let reference = schema["$ref"].as_str().or_else(|| {
                schema["allOf"]
                    .as_array()
                    .filter(|a| a.len() == 1)
                    .and_then(|a| a[0]["$ref"].as_str())
            });
            let Some(name) = reference.and_then(|r| r.rsplit('/').next()) else {
                return schema;
            };
            match self.definitions.get(name) {
                Some(s) => schema = s,
                None => return schema,
            }
        }
        schema
    }
}

/// The schema of the built-in kind `group/version, Kind=kind`, if there is one.
fn generate(group: &str, version: &str, kind: &str) -> Option<Schemas> {
    use k8s_openapi::schemars::generate::SchemaSettings;
    macro_rules! try_types {
        ($($ty:ty),* $(,)?) => {{
            $(
                if <$ty as k8s_openapi::Resource>::GROUP == group
                    && <$ty as k8s_openapi::Resource>::VERSION == version
                    && <$ty as k8s_openapi::Resource>::KIND == kind
                {
                    let mut generator = SchemaSettings::openapi3()
                        .with(|s| s.meta_schema = None)
                        .into_generator();
                    let root = generator.subschema_for::<$ty>();
                    let definitions = generator.take_definitions(true);
                    return Some(Schemas { root: root.to_value(), definitions });
                }
            )*
        }};
    }
    crate::registry::types::with_builtin_types!(try_types);
    None
}

/// The schemas of a built-in kind, generated once.
fn schemas_of(group: &str, version: &str, kind: &str) -> Option<Arc<Schemas>> {
    type Memo = Mutex<HashMap<(String, String, String), Option<Arc<Schemas>>>>;
    static MEMO: LazyLock<Memo> = LazyLock::new(Default::default);
    let key = (group.to_owned(), version.to_owned(), kind.to_owned());
    if let Some(found) = MEMO.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return found.clone();
    }
    let made = generate(group, version, kind).map(Arc::new);
    MEMO.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, made.clone());
    made
}

/// cel-go's issues text for `source` checked against `schemas` (empty: none found).
fn issues(source: &str, schemas: &Schemas) -> String {
    let Ok(program) = Program::compile(source) else {
        // Parse errors are the policy's runtime error already; nothing to type-check.
        return String::new();
    };
    let mut undefined: Vec<String> = Vec::new();
    let mut scope: Vec<(String, Value)> = vec![
        ("object".into(), schemas.root.clone()),
        ("oldObject".into(), schemas.root.clone()),
    ];
    walk(
        &program.expression().expr,
        schemas,
        &mut scope,
        &mut undefined,
    );
    let mut searched_from = 0;
    let mut out = Vec::new();
    for field in undefined {
        let (line, column, from) = position(source, &field, searched_from);
        searched_from = from;
        let text = source.lines().nth(line).unwrap_or("");
        out.push(format!(
            "ERROR: <input>:{}:{}: undefined field '{field}'\n | {text}\n | {}^",
            line + 1,
            column + 1,
            ".".repeat(column)
        ));
    }
    out.join("\n")
}

/// Line and column (0-based) of the `.` selecting `field` at or after byte `from`, and where
/// the next search starts.
fn position(source: &str, field: &str, from: usize) -> (usize, usize, usize) {
    let needle = format!(".{field}");
    let at = source
        .get(from..)
        .and_then(|rest| {
            rest.match_indices(&needle)
                .find(|(i, _)| {
                    let after = rest[i + needle.len()..].chars().next();
                    !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
                .map(|(i, _)| from + i)
        })
        .or_else(|| source.find(&needle))
        .unwrap_or(0);
    let line = source[..at].matches('\n').count();
    let column = at - source[..at].rfind('\n').map_or(0, |n| n + 1);
    (line, column, at + 1)
}

/// The schema an expression evaluates to, when it is a field path of a typed variable.
fn typed<'s>(e: &Expr, schemas: &'s Schemas, scope: &'s [(String, Value)]) -> Option<&'s Value> {
    match e {
        Expr::Ident(name) => scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, s)| schemas.resolve(s)),
        Expr::Select(s) => {
            let parent = typed(&s.operand.expr, schemas, scope)?;
            field_schema(parent, &s.field, schemas).ok().flatten()
        }
        _ => None,
    }
}

/// The schema of `field` of an object of schema `parent`: `Ok(None)` when the schema does
/// not say (no properties: a free-form object, a string-or-int, …), `Err` when it has
/// properties and not this one.
fn field_schema<'s>(
    parent: &'s Value,
    field: &str,
    schemas: &'s Schemas,
) -> Result<Option<&'s Value>, ()> {
    if let Some(props) = parent["properties"].as_object() {
        return match props.get(field) {
            Some(s) => Ok(Some(schemas.resolve(s))),
            None if parent["additionalProperties"].is_object()
                || parent["additionalProperties"] == Value::Bool(true)
                || parent["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) =>
            {
                Ok(None)
            }
            None => Err(()),
        };
    }
    match &parent["additionalProperties"] {
        Value::Object(_) => Ok(Some(schemas.resolve(&parent["additionalProperties"]))),
        _ => Ok(None),
    }
}

/// Walks `e`, noting the fields selected on typed values that their schema lacks.
fn walk(e: &Expr, schemas: &Schemas, scope: &mut Vec<(String, Value)>, out: &mut Vec<String>) {
    match e {
        Expr::Select(s) => {
            walk(&s.operand.expr, schemas, scope, out);
            if let Some(parent) = typed(&s.operand.expr, schemas, scope)
                && field_schema(parent, &s.field, schemas).is_err()
            {
                out.push(s.field.clone());
            }
        }
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                walk(&t.expr, schemas, scope, out);
            }
            for a in &c.args {
                walk(&a.expr, schemas, scope, out);
            }
        }
        Expr::List(l) => {
            for x in &l.elements {
                walk(&x.expr, schemas, scope, out);
            }
        }
        Expr::Map(m) => {
            for en in &m.entries {
                if let EntryExpr::MapEntry(me) = &en.expr {
                    walk(&me.key.expr, schemas, scope, out);
                    walk(&me.value.expr, schemas, scope, out);
                }
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range.expr, schemas, scope, out);
            walk(&c.accu_init.expr, schemas, scope, out);
            // The loop variable of a list of a known item schema is typed by it.
            let item = typed(&c.iter_range.expr, schemas, scope)
                .filter(|s| s["type"] == "array")
                .map(|s| schemas.resolve(&s["items"]).clone());
            // Untyped otherwise (it shadows an outer typed variable of the same name).
            scope.push((c.iter_var.clone(), item.unwrap_or_else(|| json!({}))));
            for x in [&c.loop_cond, &c.loop_step, &c.result] {
                walk(&x.expr, schemas, scope, out);
            }
            scope.pop();
        }
        Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(expression: &str, message: &str) -> Value {
        json!({
            "metadata": {"name": "p", "generation": 1},
            "spec": {
                "matchConstraints": {"resourceRules": [
                    {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
                     "operations": ["CREATE"]},
                    {"apiGroups": ["*"], "apiVersions": ["v1"], "resources": ["pods"],
                     "operations": ["CREATE"]},
                ]},
                "validations": [{"expression": expression, "messageExpression": message}],
            },
        })
    }

    #[test]
    fn undefined_fields_are_warned_as_cel_go_words_them() {
        let w = check(&policy("object.spec.replicass > 1", "'x'"));
        assert_eq!(
            w,
            vec![json!({
                "fieldRef": "spec.validations[0].expression",
                "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replicass'\n | object.spec.replicass > 1\n | ...........^\n",
            })]
        );
        // Defined fields, maps and free-form values pass.
        assert!(
            check(&policy(
                "object.spec.replicas > 1 && object.metadata.labels.app == 'x' \
                 && object.spec.template.spec.containers.all(c, c.image != '') \
                 && oldObject.spec.strategy.rollingUpdate.maxSurge == 1",
                "'replicas: ' + string(object.spec.replicas)"
            ))
            .is_empty()
        );
        // Loop variables are typed by the list's items; messageExpressions are checked too.
        let w = check(&policy(
            "object.spec.template.spec.containers.all(c, c.imag != '')",
            "object.spec.nope",
        ));
        assert_eq!(w.len(), 2);
        assert!(
            w[0]["warning"]
                .as_str()
                .unwrap()
                .contains("undefined field 'imag'")
        );
        assert_eq!(w[1]["fieldRef"], "spec.validations[0].messageExpression");
    }

    #[test]
    fn only_rules_without_wildcards_are_checked() {
        let mut p = policy("object.nope", "");
        p["spec"]["matchConstraints"]["resourceRules"][0]["apiVersions"] = json!(["*"]);
        assert!(check(&p).is_empty());
    }
}
