//! Helpers of upstream's `pkg/controller/deployment/util`: the pod-template hash, fenceposts
//! (maxSurge/maxUnavailable), revisions, annotations and conditions.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

/// `pod-template-hash`.
pub(crate) const HASH_LABEL: &str = "pod-template-hash";
/// `deployment.kubernetes.io/revision`.
pub(crate) const REVISION: &str = "deployment.kubernetes.io/revision";
/// `deployment.kubernetes.io/revision-history`.
pub(crate) const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// `deployment.kubernetes.io/desired-replicas`.
pub(crate) const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `deployment.kubernetes.io/max-replicas`.
pub(crate) const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Annotations never copied from a Deployment to its ReplicaSets.
const SKIP_COPY: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// `rand.SafeEncodeString`'s alphabet (no vowels, no confusable characters).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The pod-template hash (`controller.ComputeHash`): FNV-32a over the template's canonical
/// JSON and the collision count, its decimal form mapped through `SafeEncodeString`.
pub(crate) fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    let canonical = serde_json::to_vec(&normalize(
        serde_json::to_value(template).unwrap_or_default(),
    ))
    .unwrap_or_default();
    feed(&canonical);
    if let Some(c) = collision_count {
        feed(&c.to_le_bytes());
    }
    h.to_string()
        .bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// Drops nulls, empty lists and empty maps (Semantic.DeepEqual treats them as absent).
pub(crate) fn normalize(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, normalize(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(normalize).collect()),
        other => other,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Whether two templates are equal once the `pod-template-hash` label is ignored
/// (`EqualIgnoreHash`).
pub(crate) fn equal_ignore_hash(a: Option<&PodTemplateSpec>, b: Option<&PodTemplateSpec>) -> bool {
    let strip = |t: Option<&PodTemplateSpec>| {
        let mut t = t.cloned().unwrap_or_default();
        if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            l.remove(HASH_LABEL);
        }
        normalize(serde_json::to_value(t).unwrap_or_default())
    };
    strip(a) == strip(b)
}

/// `spec.replicas` (default 1).
pub(crate) fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// A ReplicaSet's `spec.replicas`.
pub(crate) fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

/// A ReplicaSet's status counters.
pub(crate) fn rs_status(rs: &ReplicaSet) -> (i32, i32, i32) {
    rs.status.as_ref().map_or((0, 0, 0), |s| {
        (
            s.replicas,
            s.ready_replicas.unwrap_or(0),
            s.available_replicas.unwrap_or(0),
        )
    })
}

/// Whether the deployment uses RollingUpdate.
pub(crate) fn is_rolling(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate")
}

/// `intstr.GetScaledValueFromIntOrPercent`.
fn scaled(v: Option<&IntOrString>, total: i32, round_up: bool, default: &str) -> i32 {
    let v = v
        .cloned()
        .unwrap_or(IntOrString::String(default.to_owned()));
    match v {
        IntOrString::Int(n) => n,
        IntOrString::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let num = pct * i64::from(total);
            let r = if round_up {
                (num + 99) / 100
            } else {
                num / 100
            };
            i32::try_from(r).unwrap_or(0)
        }
    }
}

/// (maxSurge, maxUnavailable) resolved against the desired replicas (`ResolveFenceposts`).
pub(crate) fn fenceposts(d: &Deployment) -> (i32, i32) {
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let desired = replicas(d);
    let surge = scaled(ru.and_then(|r| r.max_surge.as_ref()), desired, true, "25%");
    let mut unavailable = scaled(
        ru.and_then(|r| r.max_unavailable.as_ref()),
        desired,
        false,
        "25%",
    );
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// `MaxSurge`.
pub(crate) fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) {
        return 0;
    }
    fenceposts(d).0
}

/// `MaxUnavailable`.
pub(crate) fn max_unavailable(d: &Deployment) -> i32 {
    if !is_rolling(d) || replicas(d) == 0 {
        return 0;
    }
    fenceposts(d).1.min(replicas(d))
}

/// The revision annotation of an object (0 if absent or malformed).
pub(crate) fn revision(annotations: Option<&BTreeMap<String, String>>) -> i64 {
    annotations
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Copies the Deployment's annotations to the ReplicaSet (`copyDeploymentAnnotationsToReplicaSet`);
/// true if anything changed.
pub(crate) fn copy_annotations(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let mut changed = false;
    let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if SKIP_COPY.contains(&k.as_str()) || ann.get(k) == Some(v) {
            continue;
        }
        ann.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// Sets desired/max replicas annotations; true if changed (`SetReplicasAnnotations`).
pub(crate) fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let v = v.to_string();
        if ann.get(k) != Some(&v) {
            ann.insert(k.to_owned(), v);
            changed = true;
        }
    }
    changed
}

/// The max-replicas annotation.
pub(crate) fn max_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MAX_REPLICAS))
        .and_then(|v| v.parse().ok())
}

/// The desired-replicas annotation.
pub(crate) fn desired_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESIRED_REPLICAS))
        .and_then(|v| v.parse().ok())
}

/// The condition of `type_`.
pub(crate) fn condition<'a>(
    s: &'a DeploymentStatus,
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    s.conditions.iter().flatten().find(|c| c.type_ == type_)
}

/// A new condition stamped now.
pub(crate) fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
) -> DeploymentCondition {
    let now = Time(jiff::Timestamp::now());
    DeploymentCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// `SetDeploymentCondition`: same status and reason keeps the old one; same status keeps the
/// transition time.
pub(crate) fn set_condition(s: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(cur) = condition(s, &c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(s, &c.type_);
    s.conditions.get_or_insert_with(Vec::new).push(c);
}

/// `RemoveDeploymentCondition`.
pub(crate) fn remove_condition(s: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = s.conditions.as_mut() {
        cs.retain(|c| c.type_ != type_);
        if cs.is_empty() {
            s.conditions = None;
        }
    }
}

/// `progressDeadlineSeconds` unless unset or MaxInt32.
pub(crate) fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

/// `DeploymentComplete`.
pub(crate) fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let r = replicas(d);
    s.updated_replicas.unwrap_or(0) == r
        && s.replicas.unwrap_or(0) == r
        && s.available_replicas.unwrap_or(0) == r
        && s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`.
pub(crate) fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let g = |o: Option<i32>| o.unwrap_or(0);
    let old_old = g(old.replicas) - g(old.updated_replicas);
    let new_old = g(new.replicas) - g(new.updated_replicas);
    g(new.updated_replicas) > g(old.updated_replicas)
        || new_old < old_old
        || g(new.ready_replicas) > g(old.ready_replicas)
        || g(new.available_replicas) > g(old.available_replicas)
}

/// `DeploymentTimedOut`.
pub(crate) fn timed_out(d: &Deployment, s: &DeploymentStatus) -> bool {
    let Some(deadline) = progress_deadline(d) else {
        return false;
    };
    let Some(c) = condition(s, "Progressing") else {
        return false;
    };
    match c.reason.as_deref() {
        Some("NewReplicaSetAvailable") => return false,
        Some("ProgressDeadlineExceeded") => return true,
        _ => {}
    }
    let Some(from) = c.last_update_time.as_ref() else {
        return false;
    };
    from.0 + jiff::SignedDuration::from_secs(i64::from(deadline)) < jiff::Timestamp::now()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]}
        }))
        .unwrap()
    }

    fn deployment(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        }
    }

    #[test]
    fn hash_is_stable_safe_encoded_and_changes_with_template_and_collisions() {
        let a = compute_hash(&template("nginx:1.25"), None);
        assert_eq!(a, compute_hash(&template("nginx:1.25"), None));
        assert!(a.len() >= 6 && a.len() <= 10, "{a}");
        assert!(a.bytes().all(|b| ALPHANUMS.contains(&b)), "{a}");
        assert_ne!(a, compute_hash(&template("nginx:1.26"), None));
        assert_ne!(a, compute_hash(&template("nginx:1.25"), Some(1)));
    }

    #[test]
    fn equal_ignoring_the_hash_label_and_empty_fields() {
        let a = template("x");
        let mut b = a.clone();
        b.metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(HASH_LABEL.into(), "abc".into());
        b.metadata.as_mut().unwrap().annotations = Some(BTreeMap::new());
        assert!(equal_ignore_hash(Some(&a), Some(&b)));
        assert!(!equal_ignore_hash(Some(&a), Some(&template("y"))));
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        let pct = |s: &str| IntOrString::String(s.into());
        let d = deployment(3, pct("25%"), pct("25%"));
        assert_eq!(fenceposts(&d), (1, 0));
        let d = deployment(10, pct("25%"), pct("25%"));
        assert_eq!(fenceposts(&d), (3, 2));
        let d = deployment(3, IntOrString::Int(0), IntOrString::Int(0));
        assert_eq!(fenceposts(&d), (0, 1));
        let d = deployment(2, IntOrString::Int(1), IntOrString::Int(5));
        assert_eq!(max_unavailable(&d), 2);
    }

    #[test]
    fn set_condition_keeps_transition_time_when_status_stays() {
        let mut s = DeploymentStatus::default();
        let mut first = new_condition("Progressing", "True", "ReplicaSetUpdated", "a".into());
        first.last_transition_time = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        set_condition(&mut s, first);
        set_condition(
            &mut s,
            new_condition("Progressing", "True", "NewReplicaSetAvailable", "b".into()),
        );
        let c = condition(&s, "Progressing").unwrap();
        assert_eq!(c.reason.as_deref(), Some("NewReplicaSetAvailable"));
        assert_eq!(
            c.last_transition_time,
            Some(Time(jiff::Timestamp::UNIX_EPOCH))
        );
        set_condition(
            &mut s,
            new_condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                "c".into(),
            ),
        );
        let c = condition(&s, "Progressing").unwrap();
        assert_ne!(
            c.last_transition_time,
            Some(Time(jiff::Timestamp::UNIX_EPOCH))
        );
    }
}
