//! Controller history, shared by the DaemonSet and StatefulSet controllers (upstream
//! `pkg/controller/history` and the two controllers' use of it): a ControllerRevision
//! (apps/v1) per distinct pod template an owner has had, named `<owner>-<hash>`, controlled by
//! the owner, labelled with the template's labels and a hash label, annotated with the
//! owner's annotations (`kubernetes.io/change-cause` for `kubectl rollout history`), holding
//! the strategic merge patch that restores the template (`kubectl rollout undo` applies it)
//! and a revision number that grows: a template that returns to an earlier one reuses that
//! revision, renumbered as the newest. Revisions no pod uses beyond `revisionHistoryLimit`
//! are deleted, oldest first.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};

use crate::context::ReconcileError;

/// The DaemonSet's hash label, on its revisions and pods (upstream
/// `DefaultDaemonSetUniqueLabelKey`); StatefulSet pods carry their revision's name in it.
pub(crate) const POD_HASH_LABEL: &str = "controller-revision-hash";
/// The hash label of revisions made by `history.NewControllerRevision` (StatefulSets).
pub(crate) const REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";
/// Upstream's `revisionHistoryLimit` default.
pub(crate) const DEFAULT_LIMIT: i32 = 10;

/// The patch a revision stores for a pod template:
/// `{"spec":{"template":{...,"$patch":"replace"}}}` (upstream `getPatch`).
pub(crate) fn template_patch(template: &PodTemplateSpec) -> Result<Value, serde_json::Error> {
    let mut t = serde_json::to_value(template)?;
    if let Value::Object(map) = &mut t {
        map.insert("$patch".to_owned(), json!("replace"));
    }
    Ok(json!({"spec": {"template": t}}))
}

/// 32-bit FNV-1a.
fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The hash of revision data and the owner's collision count, spelled as upstream spells
/// its hashes (`rand.SafeEncodeString` of the decimal 32-bit hash: no vowels, no look-alike
/// digits). Object keys are sorted, so equal data hashes alike whatever its key order.
pub(crate) fn hash(data: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = data.to_string().into_bytes();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&c.to_le_bytes());
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    fnv32a(&bytes)
        .to_string()
        .bytes()
        .map(|b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
        .collect()
}

/// `<owner>-<hash>`, the owner's name cut to leave room for the hash (upstream
/// `ControllerRevisionName`).
pub(crate) fn revision_name(owner: &str, hash: &str) -> String {
    let owner: String = owner.chars().take(223).collect();
    format!("{owner}-{hash}")
}

/// The revision's stored data.
pub(crate) fn data(rev: &ControllerRevision) -> Option<&Value> {
    rev.data.as_ref().map(|d| &d.0)
}

/// The revisions in `store` that the object `uid` in `namespace` controls, oldest first
/// (by revision number, then name: upstream `SortControllerRevisions`).
pub(crate) fn controlled(
    store: &Store<ControllerRevision>,
    namespace: &str,
    uid: &str,
) -> Vec<ControllerRevision> {
    let mut out: Vec<ControllerRevision> = store
        .state()
        .iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(namespace))
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .map(|r| (**r).clone())
        .collect();
    out.sort_by(|a, b| (a.revision, &a.metadata.name).cmp(&(b.revision, &b.metadata.name)));
    out
}

/// One more than the highest revision number of `revs` (1 for none).
pub(crate) fn next_revision(revs: &[ControllerRevision]) -> i64 {
    revs.iter().map(|r| r.revision).max().unwrap_or(0) + 1
}

/// What a new revision is made of.
pub(crate) struct Snapshot<'a> {
    /// The owner's kind (`DaemonSet`, `StatefulSet`).
    pub(crate) kind: &'static str,
    /// The owner's metadata (name, namespace, uid, annotations).
    pub(crate) owner: &'a ObjectMeta,
    /// The pod template's labels.
    pub(crate) template_labels: Option<&'a BTreeMap<String, String>>,
    /// The patch it stores ([`template_patch`]).
    pub(crate) data: Value,
    /// Its revision number.
    pub(crate) revision: i64,
    /// The label that carries the hash ([`POD_HASH_LABEL`] or [`REVISION_HASH_LABEL`]).
    pub(crate) hash_label: &'static str,
    /// The owner's `status.collisionCount`.
    pub(crate) collision_count: Option<i32>,
}

impl Snapshot<'_> {
    /// The hash of this snapshot.
    pub(crate) fn hash(&self) -> String {
        hash(&self.data, self.collision_count)
    }

    /// The ControllerRevision to create.
    pub(crate) fn revision(&self) -> ControllerRevision {
        let hash = self.hash();
        let owner = self.owner.name.clone().unwrap_or_default();
        let mut labels = self.template_labels.cloned().unwrap_or_default();
        labels.insert(self.hash_label.to_owned(), hash.clone());
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(revision_name(&owner, &hash)),
                namespace: self.owner.namespace.clone(),
                labels: Some(labels),
                annotations: self.owner.annotations.clone().filter(|a| !a.is_empty()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".to_owned(),
                    kind: self.kind.to_owned(),
                    name: owner,
                    uid: self.owner.uid.clone().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(self.data.clone())),
            revision: self.revision,
        }
    }
}

/// How creating a revision went.
pub(crate) enum Created {
    /// Created, or found already there with the same data (an earlier sync made it).
    Made(Box<ControllerRevision>),
    /// Another revision of that name holds other data: the owner's collision count must grow.
    Collision,
}

/// Creates `snap`'s revision; a revision of the same name and data counts as made.
pub(crate) async fn create(
    client: &kube::Client,
    snap: &Snapshot<'_>,
) -> Result<Created, ReconcileError> {
    let rev = snap.revision();
    let ns = snap.owner.namespace.as_deref().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
    match api.create(&PostParams::default(), &rev).await {
        Ok(r) => Ok(Created::Made(Box::new(r))),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let name = rev.metadata.name.as_deref().unwrap_or_default();
            let existing = api.get(name).await?;
            if data(&existing) == Some(&snap.data) {
                Ok(Created::Made(Box::new(existing)))
            } else {
                Ok(Created::Collision)
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Renumbers `rev` as revision `n` (a template that returned to an earlier one).
pub(crate) async fn renumber(
    client: &kube::Client,
    rev: &ControllerRevision,
    n: i64,
) -> Result<ControllerRevision, kube::Error> {
    let ns = rev.metadata.namespace.as_deref().unwrap_or_default();
    let name = rev.metadata.name.as_deref().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
    let mut r = rev.clone();
    r.revision = n;
    api.replace(name, &PostParams::default(), &r).await
}

/// The revisions to delete to keep `limit` (upstream's trimming, oldest first): of `revs`
/// (oldest first), only those `live` says no pod or status uses are deleted. With
/// `live_count` (the DaemonSet's way) live revisions count towards the excess; without (the
/// StatefulSet's), only the others do.
pub(crate) fn to_trim(
    revs: &[ControllerRevision],
    limit: i32,
    live: impl Fn(&ControllerRevision) -> bool,
    live_count: bool,
) -> Vec<&ControllerRevision> {
    let limit = usize::try_from(limit).unwrap_or(0);
    let candidates: Vec<&ControllerRevision> = revs.iter().filter(|r| !live(r)).collect();
    let counted = if live_count {
        revs.len()
    } else {
        candidates.len()
    };
    let excess = counted.saturating_sub(limit);
    candidates.into_iter().take(excess).collect()
}

/// Deletes `revs` (a revision already gone is fine).
pub(crate) async fn delete(
    client: &kube::Client,
    revs: &[&ControllerRevision],
) -> Result<(), kube::Error> {
    for r in revs {
        let ns = r.metadata.namespace.as_deref().unwrap_or_default();
        let name = r.metadata.name.as_deref().unwrap_or_default();
        let api: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(name: &str, n: i64) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: None,
            revision: n,
        }
    }

    #[test]
    fn the_patch_replaces_the_whole_template() {
        let t = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_owned(), "x".to_owned())].into()),
                ..ObjectMeta::default()
            }),
            spec: None,
        };
        let p = template_patch(&t).unwrap();
        assert_eq!(p["spec"]["template"]["$patch"], "replace");
        assert_eq!(p["spec"]["template"]["metadata"]["labels"]["app"], "x");
        assert_eq!(p.as_object().map(|o| o.len()), Some(1));
    }

    #[test]
    fn hashes_are_stable_safe_and_change_with_data_and_collisions() {
        let a = json!({"spec": {"template": {"b": 1, "a": 2}}});
        let b: Value = serde_json::from_str(r#"{"spec":{"template":{"a":2,"b":1}}}"#).unwrap();
        assert_eq!(hash(&a, None), hash(&b, None));
        assert_ne!(hash(&a, None), hash(&a, Some(1)));
        assert_ne!(hash(&a, None), hash(&json!({"spec": {}}), None));
        let h = hash(&a, None);
        assert!(!h.is_empty() && h.len() <= 10, "{h}");
        assert!(
            h.bytes()
                .all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c)),
            "{h}"
        );
        // FNV-1a's published test vector.
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        assert_eq!(revision_name("web", "abc"), "web-abc");
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
    }

    #[test]
    fn snapshots_carry_the_owner_labels_annotations_and_controller_reference() {
        let owner = ObjectMeta {
            name: Some("agent".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            annotations: Some([("kubernetes.io/change-cause".to_owned(), "v2".to_owned())].into()),
            ..ObjectMeta::default()
        };
        let labels: BTreeMap<String, String> = [("app".to_owned(), "agent".to_owned())].into();
        let snap = Snapshot {
            kind: "DaemonSet",
            owner: &owner,
            template_labels: Some(&labels),
            data: json!({"spec": {"template": {"$patch": "replace"}}}),
            revision: 3,
            hash_label: POD_HASH_LABEL,
            collision_count: None,
        };
        let r = snap.revision();
        let h = snap.hash();
        assert_eq!(r.metadata.name, Some(format!("agent-{h}")));
        let l = r.metadata.labels.clone().unwrap_or_default();
        assert_eq!(l.get("app").map(String::as_str), Some("agent"));
        assert_eq!(l.get(POD_HASH_LABEL), Some(&h));
        assert_eq!(
            r.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kubernetes.io/change-cause"))
                .map(String::as_str),
            Some("v2")
        );
        let o = &r.metadata.owner_references.unwrap_or_default()[0];
        assert_eq!((o.kind.as_str(), o.uid.as_str()), ("DaemonSet", "u"));
        assert_eq!(o.controller, Some(true));
        assert_eq!(r.revision, 3);
    }

    #[test]
    fn trimming_keeps_the_limit_and_never_deletes_live_revisions() {
        let revs: Vec<_> = (1..=5).map(|n| rev(&format!("r{n}"), n)).collect();
        let names = |v: Vec<&ControllerRevision>| -> Vec<String> {
            v.into_iter()
                .filter_map(|r| r.metadata.name.clone())
                .collect()
        };
        let live = |r: &ControllerRevision| matches!(r.revision, 1 | 5);
        // StatefulSet: the limit counts only unused revisions (r2..r4): keep 1, delete 2.
        assert_eq!(names(to_trim(&revs, 1, live, false)), ["r2", "r3"]);
        // DaemonSet: every revision counts (5 - 1 = 4 to go), but live ones stay.
        assert_eq!(names(to_trim(&revs, 1, live, true)), ["r2", "r3", "r4"]);
        assert!(to_trim(&revs, 10, live, true).is_empty());
        assert_eq!(names(to_trim(&revs, 0, |_| false, false)).len(), 5);
        assert_eq!(next_revision(&revs), 6);
        assert_eq!(next_revision(&[]), 1);
    }
}
