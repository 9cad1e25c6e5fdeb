//! What the generic handlers do differently for a custom resource — each a hook the
//! built-in path calls at the same stage it runs its own per-kind code (typed decoding,
//! defaulting, validation, tables, server-owned fields), so a custom resource goes through
//! the one request pipeline a built-in one does (upstream's `customresource` strategy and
//! handler): schema pruning, defaulting and validation, the refusal of new objects while the
//! CRD is being deleted, `metadata.generation`, server-side Tables from
//! `additionalPrinterColumns`, and the CRD's own deletion (the cleanup finalizer).

use serde_json::{Map, Value, json};

use crate::error::{ApiError, FieldError, Result};
use crate::registry::catalog::{KindClass, ResourceInfo};
use crate::registry::custom;

/// Whether `r` is a custom resource.
pub fn is_custom(r: &ResourceInfo) -> bool {
    matches!(r.kind_class, KindClass::Custom { .. })
}

/// Whether `r` is the CustomResourceDefinitions resource itself.
pub fn is_crd(r: &ResourceInfo) -> bool {
    r.group == "apiextensions.k8s.io" && r.plural == "customresourcedefinitions"
}

/// Refuses a create of a custom resource whose CRD is being deleted (upstream's 405).
pub fn check_create(r: &ResourceInfo) -> Result<()> {
    match custom::lookup(r) {
        Some(c) if c.terminating => Err(ApiError::NotAllowed(
            "create not allowed while custom resource definition is terminating".into(),
        )),
        _ => Ok(()),
    }
}

/// The warning a deprecated version answers with, if `r` is one.
pub fn deprecation_warning(r: &ResourceInfo) -> Option<String> {
    custom::lookup(r).and_then(|c| c.deprecation_warning.clone())
}

/// A custom resource with the fields its schema does not know removed (upstream's pruning
/// while decoding), and their paths (`spec.foo`) for `fieldValidation`.
pub fn prune(r: &ResourceInfo, obj: Map<String, Value>) -> crate::registry::typed::Decoded {
    let mut value = Value::Object(obj);
    let unknown = match custom::lookup(r)
        .as_ref()
        .and_then(|c| c.structural.as_ref())
    {
        Some(schema) => super::schema::prune(schema, &mut value),
        None => Vec::new(),
    };
    let object = match value {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    crate::registry::typed::Decoded { object, unknown }
}

/// Applies the schema's defaults to a custom resource (on create and update).
pub fn default(r: &ResourceInfo, obj: &mut Map<String, Value>) {
    let Some(c) = custom::lookup(r) else {
        return;
    };
    let Some(schema) = c.structural.as_ref() else {
        return;
    };
    let mut value = Value::Object(std::mem::take(obj));
    super::schema::default(schema, &mut value);
    if let Value::Object(m) = value {
        *obj = m;
    }
}

/// Validates a custom resource against its CRD's schema (the generic metadata checks run
/// apart), or a CRD against upstream's CRD rules.
pub fn validate(
    r: &ResourceInfo,
    obj: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let served = custom::lookup(r);
    if let Some(schema) = served.as_ref().and_then(|c| c.structural.as_ref()) {
        errs.extend(super::schema::validate(schema, &Value::Object(obj.clone())));
        if let Some(rules) = served.as_ref().and_then(|c| c.cel.as_ref()) {
            // Upstream's `hasBlockingErr`: no rule runs on a value of the wrong type.
            if errs
                .iter()
                .any(|e| matches!(e.reason, "FieldValueTypeInvalid" | "FieldValueNotSupported"))
            {
                errs.push(FieldError {
                    reason: "FieldValueInvalid",
                    field: "<nil>".into(),
                    message: "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
                });
            } else {
                let old = old.map(|o| Value::Object(o.clone()));
                errs.extend(rules.validate(schema, &Value::Object(obj.clone()), old.as_ref()));
            }
        }
    }
    if is_crd(r) {
        errs.extend(crd_errors(obj, old));
    }
    if is_custom(r) {
        for field in ["apiVersion", "kind"] {
            if obj
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errs.push(FieldError {
                    reason: "FieldValueRequired",
                    field: field.into(),
                    message: "Required value".into(),
                });
            }
        }
    }
    errs
}

/// Upstream's CRD validation: the CRD's own rules, then the structural-schema rules of each
/// version's schema (once when every version has the same schema, at upstream's path).
fn crd_errors(obj: &Map<String, Value>, old: Option<&Map<String, Value>>) -> Vec<FieldError> {
    let crd = Value::Object(obj.clone());
    let old = old.map(|o| Value::Object(o.clone()));
    let mut errs = super::crd_validation::validate_crd(&crd, old.as_ref());
    let mut seen = std::collections::HashSet::new();
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, v) in versions.iter().enumerate() {
        let Some(schema) = v.pointer("/schema/openAPIV3Schema") else {
            continue;
        };
        let path = super::crd_validation::schema_path(&crd, i);
        if !seen.insert(path.clone()) {
            continue;
        }
        let at = path.trim_end_matches(".openAPIV3Schema");
        let status = v
            .pointer("/subresources/status")
            .is_some_and(Value::is_object);
        let structural = super::schema::structural_errors(schema, at, status);
        let compiles = structural.is_empty();
        errs.extend(structural);
        if compiles {
            errs.extend(super::cel::compile_errors(schema, at));
        }
    }
    errs
}

/// Whether an update of a custom resource changes what `metadata.generation` counts: any
/// top-level field but `metadata` (and `status`, when the status subresource owns it).
pub fn spec_changed(r: &ResourceInfo, new: &Map<String, Value>, old: &Map<String, Value>) -> bool {
    let has_status = r.subresources.iter().any(|s| s.name == "status");
    let counted = |k: &String| k != "metadata" && !(has_status && k == "status");
    let differs = |a: &Map<String, Value>, b: &Map<String, Value>| {
        a.iter()
            .filter(|(k, _)| counted(k))
            .any(|(k, v)| b.get(k) != Some(v))
    };
    differs(new, old) || differs(old, new)
}

/// What deleting a CRD adds to it first (upstream's CRD REST `Delete`): the cleanup
/// finalizer, so its objects are deleted before it, and the `Terminating` condition.
pub fn before_crd_delete(obj: &mut Map<String, Value>) {
    let mut value = Value::Object(std::mem::take(obj));
    let finalizers = &mut value["metadata"]["finalizers"];
    if !finalizers.is_array() {
        *finalizers = json!([]);
    }
    if let Some(f) = finalizers.as_array_mut()
        && !f.iter().any(|x| x == super::controller::CLEANUP_FINALIZER)
    {
        f.push(json!(super::controller::CLEANUP_FINALIZER));
    }
    value["status"] = super::naming::terminating_status(
        &value,
        &super::naming::Termination::Pending,
        jiff::Timestamp::now(),
    );
    if let Value::Object(m) = value {
        *obj = m;
    }
}

/// Column definitions and row cells of a server-side Table of custom resources, from the
/// CRD's `additionalPrinterColumns` (default: Name and Age), ages measured against `now`.
pub fn table(
    r: &ResourceInfo,
    objects: &[Map<String, Value>],
    now: jiff::Timestamp,
) -> (Vec<Value>, Vec<Vec<Value>>) {
    let served = custom::lookup(r);
    let fallback;
    let printer = match &served {
        Some(c) => &c.printer,
        None => {
            fallback = super::printer::Printer::new(&json!([]));
            &fallback
        }
    };
    let rows = objects.iter().map(|o| printer.cells(o, now)).collect();
    (printer.column_definitions().to_vec(), rows)
}

/// The paths of a custom resource's scale subresource (`specReplicasPath`,
/// `statusReplicasPath`, `labelSelectorPath`), each split into its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// Where the desired replicas are, e.g. `["spec", "replicas"]`.
    pub spec_replicas: Vec<String>,
    /// Where the observed replicas are, e.g. `["status", "replicas"]`.
    pub status_replicas: Vec<String>,
    /// Where the selector string is, if the CRD names it.
    pub label_selector: Option<Vec<String>>,
}

/// The scale paths of custom resource `r`, if its CRD enables the scale subresource.
pub fn scale_paths(r: &ResourceInfo) -> Option<ScalePaths> {
    let c = custom::lookup(r)?;
    let scale = c.scale.as_ref()?;
    let split = |p: &str| -> Vec<String> {
        p.trim_start_matches('.')
            .split('.')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    Some(ScalePaths {
        spec_replicas: split(scale["specReplicasPath"].as_str()?),
        status_replicas: split(scale["statusReplicasPath"].as_str()?),
        label_selector: scale["labelSelectorPath"].as_str().map(split),
    })
}

/// The value at `path` in `obj`.
pub fn get_path<'a>(obj: &'a Map<String, Value>, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    rest.iter().try_fold(obj.get(first)?, |v, f| v.get(f))
}

/// Sets the value at `path` in `obj`, creating objects on the way (replacing non-objects).
pub fn set_path(obj: &mut Map<String, Value>, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for f in parents {
        let next = cur.entry(f.clone()).or_insert_with(|| json!({}));
        if !next.is_object() {
            *next = json!({});
        }
        let Some(m) = next.as_object_mut() else {
            return;
        };
        cur = m;
    }
    cur.insert(last.clone(), value);
}
