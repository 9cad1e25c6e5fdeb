//! `Priority` (upstream's `plugin/pkg/admission/priority`): a new pod gets
//! `spec.priority` (and `spec.preemptionPolicy`) from its PriorityClass, or from the
//! global default class when it names none (priority 0 without one); an unknown class is
//! refused. Only one PriorityClass may be the global default. [`bootstrap`] creates
//! upstream's two system classes at start-up.

use serde_json::{Map, Value, json};

use super::{Attributes, Lookup, MutatingAdmission, Operation, ValidatingAdmission, forbidden};
use crate::error::{ApiError, Result};
use crate::storage::{self, Storage};

/// The plugin.
pub struct Priority;

const PREFIX: &str = "/registry/scheduling.k8s.io/priorityclasses/";

/// Upstream's system PriorityClasses: name, value, description.
pub const SYSTEM_CLASSES: &[(&str, i64, &str)] = &[
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// Creates the system PriorityClasses that are missing (upstream's
/// `scheduling/bootstrap-system-priority-classes` post-start hook).
pub async fn bootstrap(storage: &Storage) -> Result<()> {
    let store_error = |e: storage::Error| ApiError::Internal(e.to_string());
    for (name, value, description) in SYSTEM_CLASSES {
        let key = format!("{PREFIX}{name}");
        if storage.get_local(&key).map_err(store_error)?.is_some() {
            continue;
        }
        let obj = json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": name,
                "uid": uuid::Uuid::new_v4().to_string(),
                "generation": 1,
                "creationTimestamp": now(),
            },
            "value": value,
            "description": description,
            "preemptionPolicy": "PreemptLowerPriority",
        });
        let bytes = serde_json::to_vec(&obj).map_err(|e| ApiError::Internal(e.to_string()))?;
        match storage.create(&key, bytes).await {
            Ok(_) | Err(storage::Error::AlreadyExists) => {}
            Err(e) => return Err(store_error(e)),
        }
        tracing::info!(name, "created PriorityClass");
    }
    Ok(())
}

/// Now as `metav1.Time` (RFC 3339, whole seconds).
fn now() -> String {
    let ts = jiff::Timestamp::now();
    jiff::Timestamp::from_second(ts.as_second()).map_or_else(|_| ts.to_string(), |t| t.to_string())
}

fn class_value(pc: &Map<String, Value>) -> i64 {
    pc.get("value").and_then(Value::as_i64).unwrap_or(0)
}

fn is_global_default(pc: &Map<String, Value>) -> bool {
    pc.get("globalDefault").and_then(Value::as_bool) == Some(true)
}

fn class_name(pc: &Map<String, Value>) -> &str {
    pc.get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The global default class (the lowest value if several claim it): name, value, policy.
fn default_class(lookup: &Lookup<'_>) -> Option<(String, i64, Option<Value>)> {
    lookup
        .list(PREFIX)
        .into_iter()
        .filter(is_global_default)
        .min_by_key(class_value)
        .map(|pc| {
            (
                class_name(&pc).to_owned(),
                class_value(&pc),
                pc.get("preemptionPolicy").cloned(),
            )
        })
}

impl MutatingAdmission for Priority {
    fn name(&self) -> &'static str {
        "Priority"
    }

    fn admit(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if !a.is_core("pods") || !a.subresource.is_empty() {
            return Ok(());
        }
        let Some(pod) = obj else {
            return Ok(());
        };
        match a.operation {
            Operation::Update => {
                // Keep what was set on create; validation refuses other changes.
                let old_spec = old.and_then(|o| o.get("spec"));
                if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
                    for field in ["priority", "preemptionPolicy"] {
                        let missing = spec.get(field).is_none_or(Value::is_null);
                        if let Some(v) = old_spec.and_then(|s| s.get(field)).filter(|_| missing) {
                            spec.insert(field.into(), v.clone());
                        }
                    }
                }
                Ok(())
            }
            Operation::Create => admit_create(lookup, a, pod),
            Operation::Delete | Operation::Connect => Ok(()),
        }
    }
}

fn admit_create(
    lookup: &Lookup<'_>,
    a: &Attributes<'_>,
    pod: &mut Map<String, Value>,
) -> Result<()> {
    let spec = pod.get("spec").cloned().unwrap_or_else(|| json!({}));
    let class = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (class, priority, policy) = if class.is_empty() {
        // Without a global default class, upstream's getDefaultPriority answers priority 0
        // and PreemptLowerPriority.
        default_class(lookup)
            .unwrap_or_else(|| (String::new(), 0, Some(json!("PreemptLowerPriority"))))
    } else {
        let Some(pc) = lookup.get(&format!("{PREFIX}{class}"))? else {
            return Err(forbidden(
                a,
                Some(pod),
                format!("no PriorityClass with name {class} was found"),
            ));
        };
        let policy = pc.get("preemptionPolicy").cloned();
        (class, class_value(&pc), policy)
    };
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != priority
    {
        return Err(forbidden(
            a,
            Some(pod),
            format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            ),
        ));
    }
    let policy = policy.filter(|p| !p.is_null());
    if let (Some(given), Some(computed)) = (
        spec.get("preemptionPolicy").and_then(Value::as_str),
        policy.as_ref().and_then(Value::as_str),
    ) && given != computed
    {
        return Err(forbidden(
            a,
            Some(pod),
            format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {computed} from the given PriorityClass name"
            ),
        ));
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if !class.is_empty() {
        spec.insert("priorityClassName".into(), json!(class));
    }
    spec.insert("priority".into(), json!(priority));
    if let Some(p) = policy {
        spec.insert("preemptionPolicy".into(), p);
    }
    Ok(())
}

impl ValidatingAdmission for Priority {
    fn name(&self) -> &'static str {
        "Priority"
    }

    fn validate(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if a.group != "scheduling.k8s.io"
            || a.resource != "priorityclasses"
            || !a.subresource.is_empty()
            || !matches!(a.operation, Operation::Create | Operation::Update)
        {
            return Ok(());
        }
        let Some(pc) = obj.filter(|pc| is_global_default(pc)) else {
            return Ok(());
        };
        let name = class_name(pc);
        if let Some(other) = lookup
            .list(PREFIX)
            .into_iter()
            .find(|o| is_global_default(o) && class_name(o) != name)
        {
            return Err(forbidden(
                a,
                obj,
                format!(
                    "PriorityClass {} is already marked as default. Only one default can exist",
                    class_name(&other)
                ),
            ));
        }
        Ok(())
    }
}
