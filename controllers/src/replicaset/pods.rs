//! Pod and selector helpers shared by the workload controllers (upstream's
//! `pkg/controller/controller_utils.go` and `pkg/api/v1/pod`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::ObjectMeta;

/// A label selector (`matchLabels` and `matchExpressions`), as `metav1.LabelSelectorAsSelector`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selector {
    labels: BTreeMap<String, String>,
    exprs: Vec<(String, String, Vec<String>)>,
    /// A nil selector matches nothing (upstream's `labels.Nothing()`).
    nothing: bool,
}

impl Selector {
    /// From a `LabelSelector` (None: matches nothing).
    pub(crate) fn from_label_selector(s: Option<&LabelSelector>) -> Self {
        let Some(s) = s else {
            return Selector {
                nothing: true,
                ..Selector::default()
            };
        };
        Selector {
            labels: s.match_labels.clone().unwrap_or_default(),
            exprs: s
                .match_expressions
                .iter()
                .flatten()
                .map(|e| {
                    (
                        e.key.clone(),
                        e.operator.clone(),
                        e.values.clone().unwrap_or_default(),
                    )
                })
                .collect(),
            nothing: false,
        }
    }

    /// From an equality map (ReplicationController's selector; empty matches nothing here, as
    /// the RC manager treats an empty selector).
    pub(crate) fn from_map(m: Option<&BTreeMap<String, String>>) -> Self {
        match m {
            Some(m) if !m.is_empty() => Selector {
                labels: m.clone(),
                ..Selector::default()
            },
            _ => Selector {
                nothing: true,
                ..Selector::default()
            },
        }
    }

    /// Whether `labels` match.
    pub(crate) fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        if self.nothing {
            return false;
        }
        let empty = BTreeMap::new();
        let labels = labels.unwrap_or(&empty);
        for (k, v) in &self.labels {
            if labels.get(k) != Some(v) {
                return false;
            }
        }
        for (k, op, values) in &self.exprs {
            let ok = match op.as_str() {
                "In" => labels.get(k).is_some_and(|v| values.contains(v)),
                "NotIn" => labels.get(k).is_none_or(|v| !values.contains(v)),
                "Exists" => labels.contains_key(k),
                "DoesNotExist" => !labels.contains_key(k),
                _ => false,
            };
            if !ok {
                return false;
            }
        }
        true
    }
}

/// The owner reference marked `controller: true`, if any.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Whether the pod is active (`FilterActivePods`): not Succeeded/Failed, not being deleted.
pub(crate) fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// When the pod's Ready condition turned True, if it is Ready.
pub(crate) fn ready_since(pod: &Pod) -> Option<Option<jiff::Timestamp>> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")?;
    (c.status == "True").then(|| c.last_transition_time.as_ref().map(|t| t.0))
}

/// Whether the pod is Ready.
pub(crate) fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Whether the pod has been Ready for at least `min_ready_seconds` at `now`
/// (`podutil.IsPodAvailable`).
pub(crate) fn is_available(pod: &Pod, min_ready_seconds: i32, now: jiff::Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(t)) => t + jiff::SignedDuration::from_secs(i64::from(min_ready_seconds)) <= now,
    }
}

/// A pod object from a controller's template (`GetPodFromTemplate`): template labels,
/// annotations and finalizers, `generateName: <prefix>`, the controller owner reference.
pub(crate) fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    generate_name: &str,
    owner: OwnerReference,
) -> Pod {
    let tm = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: tm.labels,
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// A controller owner reference (`controller: true`, `blockOwnerDeletion: true`).
pub(crate) fn controller_ref(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether every label of `template` is on `labels` (`fullyLabeledReplicas`).
pub(crate) fn fully_labeled(
    labels: Option<&BTreeMap<String, String>>,
    template: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(t) = template else { return true };
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    t.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn label_selectors_match_as_upstream() {
        let sel = Selector::from_label_selector(Some(&LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into(), "b".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        }));
        assert!(sel.matches(Some(&labels(&[("app", "web"), ("tier", "a")]))));
        assert!(!sel.matches(Some(&labels(&[("app", "web"), ("tier", "c")]))));
        assert!(!sel.matches(Some(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("canary", "1")
        ]))));
        assert!(!sel.matches(None));
        assert!(!Selector::from_label_selector(None).matches(Some(&labels(&[("a", "b")]))));
        assert!(Selector::from_label_selector(Some(&LabelSelector::default())).matches(None));
        assert!(!Selector::from_map(Some(&BTreeMap::new())).matches(None));
    }
}
