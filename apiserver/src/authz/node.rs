//! The node authorizer (upstream's `plugin/pkg/auth/authorizer/node`, authorization mode
//! `Node`): requests from a kubelet identity — user `system:node:<name>` in group
//! `system:nodes` — are judged here before RBAC.
//!
//! Secrets, config maps, persistent volume claims, persistent volumes, service-account
//! tokens, resource claims and volume attachments are readable only when the node
//! authorizer's graph relates them to the node: a pod bound to the node (`spec.nodeName`)
//! references them, or a persistent volume bound to such a pod's claim does. The graph
//! ([`Graph`]) follows the store's history of pods, persistent volumes, volume attachments
//! and resource slices, as the watch cache does. Nodes read only their own Node object,
//! list pods only with a `spec.nodeName=<self>` field selector, and reach only their own
//! Lease in `kube-node-lease` and their own CSINode. Everything else is judged by the static
//! rules of the `system:node` ClusterRole. A request this authorizer does not allow gets no
//! opinion (with upstream's reason), so RBAC still decides.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::Value;
use tokio::sync::watch;

use super::rbac::{PolicyRule, Role};
use crate::pipeline::{Decision, Outcome, UserInfo};
use crate::request_info::RequestInfo;
use crate::storage::Storage;

/// The group every kubelet identity is in.
pub const NODES_GROUP: &str = "system:nodes";
/// The prefix of a kubelet's user name.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The namespace of node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The node a user acts as (upstream's default `NodeIdentifier`): `Some(name)` for a user
/// named `system:node:<name>` in group `system:nodes` (`name` may be empty), else `None`.
pub fn node_identity(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    user.groups.iter().any(|g| g == NODES_GROUP).then_some(name)
}

/// What kind of object a graph vertex is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Secret,
    ConfigMap,
    Pvc,
    ServiceAccount,
    ResourceClaim,
}

type NsName = (String, String);

/// What a pod bound to a node references.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct PodRefs {
    node: String,
    refs: Vec<(Kind, String)>,
}

/// A persistent volume's claim and the secrets it references.
#[derive(Debug, Default, Clone)]
struct PvRefs {
    claim: Option<NsName>,
    secrets: Vec<NsName>,
}

/// The relationships the node authorizer checks.
#[derive(Debug, Default)]
struct State {
    /// Bound pods by namespace and name.
    pods: HashMap<NsName, PodRefs>,
    /// Referenced namespaced objects → the pods referencing them.
    referenced: HashMap<(Kind, String, String), HashSet<NsName>>,
    /// Persistent volumes by name.
    pvs: HashMap<String, PvRefs>,
    /// Secrets referenced by persistent volumes → the volumes.
    pv_secrets: HashMap<NsName, HashSet<String>>,
    /// Volume attachments → their node.
    attachments: HashMap<String, String>,
    /// Resource slices → their node.
    slices: HashMap<String, String>,
}

impl State {
    fn remove_pod(&mut self, key: &NsName) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        for (kind, name) in old.refs {
            let k = (kind, key.0.clone(), name);
            if let Some(set) = self.referenced.get_mut(&k) {
                set.remove(key);
                if set.is_empty() {
                    self.referenced.remove(&k);
                }
            }
        }
    }

    fn set_pod(&mut self, key: NsName, pod: Option<&Value>) {
        let refs = pod.and_then(pod_refs);
        if refs.as_ref() == self.pods.get(&key) {
            return;
        }
        self.remove_pod(&key);
        let Some(refs) = refs else {
            return;
        };
        for (kind, name) in &refs.refs {
            self.referenced
                .entry((*kind, key.0.clone(), name.clone()))
                .or_default()
                .insert(key.clone());
        }
        self.pods.insert(key, refs);
    }

    fn set_pv(&mut self, name: &str, pv: Option<&Value>) {
        if let Some(old) = self.pvs.remove(name) {
            for s in old.secrets {
                if let Some(set) = self.pv_secrets.get_mut(&s) {
                    set.remove(name);
                    if set.is_empty() {
                        self.pv_secrets.remove(&s);
                    }
                }
            }
        }
        let Some(pv) = pv else {
            return;
        };
        let refs = pv_refs(pv);
        for s in &refs.secrets {
            self.pv_secrets
                .entry(s.clone())
                .or_default()
                .insert(name.to_owned());
        }
        self.pvs.insert(name.to_owned(), refs);
    }

    /// Whether a pod bound to `node` references the object.
    fn pod_reference(&self, node: &str, kind: Kind, namespace: &str, name: &str) -> bool {
        self.referenced
            .get(&(kind, namespace.to_owned(), name.to_owned()))
            .is_some_and(|pods| {
                pods.iter()
                    .any(|p| self.pods.get(p).is_some_and(|r| r.node == node))
            })
    }

    fn pv_related(&self, node: &str, pv: &str) -> bool {
        self.pvs
            .get(pv)
            .and_then(|p| p.claim.as_ref())
            .is_some_and(|(ns, claim)| self.pod_reference(node, Kind::Pvc, ns, claim))
    }

    /// Whether the graph has a path from the object to `node`.
    fn related(&self, node: &str, target: Target, namespace: &str, name: &str) -> bool {
        match target {
            Target::Pod => self
                .pods
                .get(&(namespace.to_owned(), name.to_owned()))
                .is_some_and(|p| p.node == node),
            Target::Ref(Kind::Secret) => {
                self.pod_reference(node, Kind::Secret, namespace, name)
                    || self
                        .pv_secrets
                        .get(&(namespace.to_owned(), name.to_owned()))
                        .is_some_and(|pvs| pvs.iter().any(|pv| self.pv_related(node, pv)))
            }
            Target::Ref(kind) => self.pod_reference(node, kind, namespace, name),
            Target::Pv => self.pv_related(node, name),
            Target::VolumeAttachment => self.attachments.get(name).is_some_and(|n| n == node),
            Target::ResourceSlice => self.slices.get(name).is_some_and(|n| n == node),
        }
    }
}

/// The start of a graph check.
#[derive(Debug, Clone, Copy)]
enum Target {
    Pod,
    Ref(Kind),
    Pv,
    VolumeAttachment,
    ResourceSlice,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

fn array<'a>(v: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    v.get(field).and_then(Value::as_array).into_iter().flatten()
}

/// The objects a pod bound to a node references (`VisitPodSecretNames`,
/// `VisitPodConfigmapNames`, claims, service account); `None` for an unbound pod.
fn pod_refs(pod: &Value) -> Option<PodRefs> {
    let node = str_at(pod, &["spec", "nodeName"]);
    if node.is_empty() {
        return None;
    }
    Some(PodRefs {
        node: node.to_owned(),
        refs: collect_refs(pod),
    })
}

/// How many secrets and config maps a pod references (NodeRestriction refuses mirror pods
/// that reference any).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceCounts {
    /// Distinct secrets referenced.
    pub secrets: usize,
    /// Distinct config maps referenced.
    pub configmaps: usize,
}

/// Counts the secrets and config maps `pod` references, as upstream's
/// `VisitPodSecretNames` and `VisitPodConfigmapNames` visit them.
pub fn pod_references(pod: &Value) -> ReferenceCounts {
    let refs = collect_refs(pod);
    ReferenceCounts {
        secrets: refs.iter().filter(|(k, _)| *k == Kind::Secret).count(),
        configmaps: refs.iter().filter(|(k, _)| *k == Kind::ConfigMap).count(),
    }
}

fn collect_refs(pod: &Value) -> Vec<(Kind, String)> {
    let Some(spec) = pod.get("spec") else {
        return Vec::new();
    };
    let pod_name = str_at(pod, &["metadata", "name"]);
    let mut refs: Vec<(Kind, String)> = Vec::new();
    let mut add = |kind: Kind, name: &str| {
        if !name.is_empty() && !refs.iter().any(|(k, n)| *k == kind && n == name) {
            refs.push((kind, name.to_owned()));
        }
    };
    add(Kind::ServiceAccount, str_at(spec, &["serviceAccountName"]));
    for s in array(spec, "imagePullSecrets") {
        add(Kind::Secret, str_at(s, &["name"]));
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in array(spec, list) {
            for from in array(c, "envFrom") {
                add(Kind::Secret, str_at(from, &["secretRef", "name"]));
                add(Kind::ConfigMap, str_at(from, &["configMapRef", "name"]));
            }
            for env in array(c, "env") {
                add(
                    Kind::Secret,
                    str_at(env, &["valueFrom", "secretKeyRef", "name"]),
                );
                add(
                    Kind::ConfigMap,
                    str_at(env, &["valueFrom", "configMapKeyRef", "name"]),
                );
            }
        }
    }
    for vol in array(spec, "volumes") {
        add(Kind::Secret, str_at(vol, &["secret", "secretName"]));
        add(Kind::Secret, str_at(vol, &["azureFile", "secretName"]));
        for source in ["cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi"] {
            add(Kind::Secret, str_at(vol, &[source, "secretRef", "name"]));
        }
        add(
            Kind::Secret,
            str_at(vol, &["storageos", "secretRef", "name"]),
        );
        add(
            Kind::Secret,
            str_at(vol, &["csi", "nodePublishSecretRef", "name"]),
        );
        add(Kind::ConfigMap, str_at(vol, &["configMap", "name"]));
        if let Some(projected) = vol.get("projected") {
            for src in array(projected, "sources") {
                add(Kind::Secret, str_at(src, &["secret", "name"]));
                add(Kind::ConfigMap, str_at(src, &["configMap", "name"]));
            }
        }
        add(
            Kind::Pvc,
            str_at(vol, &["persistentVolumeClaim", "claimName"]),
        );
        if vol.get("ephemeral").is_some_and(|e| !e.is_null()) {
            add(Kind::Pvc, &format!("{pod_name}-{}", str_at(vol, &["name"])));
        }
    }
    if let Some(status) = pod.get("status") {
        for c in array(status, "resourceClaimStatuses") {
            add(Kind::ResourceClaim, str_at(c, &["resourceClaimName"]));
        }
    }
    refs
}

/// A persistent volume's claim and secrets (`VisitPVSecretNames`; a reference without a
/// namespace is in the claim's namespace).
fn pv_refs(pv: &Value) -> PvRefs {
    let spec = pv.get("spec").unwrap_or(&Value::Null);
    let claim_ns = str_at(spec, &["claimRef", "namespace"]);
    let claim_name = str_at(spec, &["claimRef", "name"]);
    let claim = (!claim_name.is_empty()).then(|| (claim_ns.to_owned(), claim_name.to_owned()));
    let mut secrets = Vec::new();
    if let Some(az) = spec.get("azureFile") {
        let name = str_at(az, &["secretName"]);
        if !name.is_empty() {
            let ns = match str_at(az, &["secretNamespace"]) {
                "" => claim_ns,
                ns => ns,
            };
            secrets.push((ns.to_owned(), name.to_owned()));
        }
    }
    let mut add = |r: Option<&Value>| {
        let Some(r) = r else {
            return;
        };
        let name = str_at(r, &["name"]);
        if name.is_empty() {
            return;
        }
        let ns = match str_at(r, &["namespace"]) {
            "" => claim_ns,
            ns => ns,
        };
        secrets.push((ns.to_owned(), name.to_owned()));
    };
    for source in [
        "cephfs",
        "cinder",
        "flexVolume",
        "rbd",
        "scaleIO",
        "iscsi",
        "storageos",
    ] {
        add(spec.get(source).and_then(|s| s.get("secretRef")));
    }
    if let Some(csi) = spec.get("csi") {
        for r in [
            "controllerPublishSecretRef",
            "nodeStageSecretRef",
            "nodePublishSecretRef",
            "controllerExpandSecretRef",
            "nodeExpandSecretRef",
        ] {
            add(csi.get(r));
        }
    }
    PvRefs { claim, secrets }
}

/// Storage prefixes the graph follows (all under `/registry/`).
const PODS: &str = "/registry/core/pods/";
const PVS: &str = "/registry/core/persistentvolumes/";
const ATTACHMENTS: &str = "/registry/storage.k8s.io/volumeattachments/";
const SLICES: &str = "/registry/resource.k8s.io/resourceslices/";
const ROOT: &str = "/registry/";
/// Changes pulled from the store per read.
const PULL: usize = 1024;

/// The node authorizer's graph, current up to [`Graph::revision`].
pub struct Graph {
    state: RwLock<State>,
    revision: watch::Sender<i64>,
}

impl Graph {
    /// A graph following `storage`; its feeder runs until the store stops.
    pub fn start(storage: Storage) -> Arc<Graph> {
        let graph = Graph::empty();
        tokio::spawn(feed(storage, Arc::clone(&graph)));
        graph
    }

    /// An empty graph (tests, and servers without a store).
    pub fn empty() -> Arc<Graph> {
        let (revision, _) = watch::channel(0);
        Arc::new(Graph {
            state: RwLock::new(State::default()),
            revision,
        })
    }

    /// A receiver of the store revision the graph is complete up to.
    pub fn revision(&self) -> watch::Receiver<i64> {
        self.revision.subscribe()
    }

    /// Applies one stored object (or its deletion) by storage key.
    fn apply(&self, state: &mut State, key: &str, value: Option<&Value>) {
        if let Some(rest) = key.strip_prefix(PODS) {
            if let Some((ns, name)) = rest.split_once('/') {
                state.set_pod((ns.to_owned(), name.to_owned()), value);
            }
        } else if let Some(name) = key.strip_prefix(PVS) {
            state.set_pv(name, value);
        } else if let Some(name) = key.strip_prefix(ATTACHMENTS) {
            let node = value.map(|v| str_at(v, &["spec", "nodeName"]).to_owned());
            match node.filter(|n| !n.is_empty()) {
                Some(n) => state.attachments.insert(name.to_owned(), n),
                None => state.attachments.remove(name),
            };
        } else if let Some(name) = key.strip_prefix(SLICES) {
            let node = value.map(|v| str_at(v, &["spec", "nodeName"]).to_owned());
            match node.filter(|n| !n.is_empty()) {
                Some(n) => state.slices.insert(name.to_owned(), n),
                None => state.slices.remove(name),
            };
        }
    }

    fn related(&self, node: &str, target: Target, namespace: &str, name: &str) -> bool {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .related(node, target, namespace, name)
    }
}

fn followed(key: &[u8]) -> bool {
    [PODS, PVS, ATTACHMENTS, SLICES]
        .iter()
        .any(|p| key.starts_with(p.as_bytes()))
}

/// Decodes a followed object: for pods only the fields the graph reads (`metadata.name`,
/// the references in `spec` and `status.resourceClaimStatuses`); the rest — containers'
/// other fields, status, managed fields — is skipped unparsed into values: every pod write
/// passes through here.
fn decode_followed(key: &[u8], bytes: &[u8]) -> Option<Value> {
    use serde::Deserialize;
    #[derive(Deserialize)]
    struct Meta {
        #[serde(default)]
        name: Option<String>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Container {
        #[serde(default)]
        env_from: Option<Value>,
        #[serde(default)]
        env: Option<Value>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        #[serde(default)]
        node_name: Option<String>,
        #[serde(default)]
        service_account_name: Option<String>,
        #[serde(default)]
        image_pull_secrets: Option<Value>,
        #[serde(default)]
        init_containers: Option<Vec<Container>>,
        #[serde(default)]
        containers: Option<Vec<Container>>,
        #[serde(default)]
        ephemeral_containers: Option<Vec<Container>>,
        #[serde(default)]
        volumes: Option<Value>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        #[serde(default)]
        resource_claim_statuses: Option<Value>,
    }
    #[derive(Deserialize)]
    struct PodView {
        metadata: Option<Meta>,
        #[serde(default)]
        spec: Option<Spec>,
        #[serde(default)]
        status: Option<Status>,
    }
    if !key.starts_with(PODS.as_bytes()) {
        return serde_json::from_slice(bytes).ok();
    }
    let pod: PodView = serde_json::from_slice(bytes).ok()?;
    let mut out = serde_json::Map::new();
    let name = pod.metadata.and_then(|m| m.name);
    out.insert("metadata".into(), serde_json::json!({ "name": name }));
    if let Some(spec) = pod.spec {
        let containers = |list: Option<Vec<Container>>| {
            list.map(|cs| {
                cs.into_iter()
                    .map(|c| serde_json::json!({"envFrom": c.env_from, "env": c.env}))
                    .collect::<Vec<_>>()
            })
        };
        out.insert(
            "spec".into(),
            serde_json::json!({
                "nodeName": spec.node_name,
                "serviceAccountName": spec.service_account_name,
                "imagePullSecrets": spec.image_pull_secrets,
                "initContainers": containers(spec.init_containers),
                "containers": containers(spec.containers),
                "ephemeralContainers": containers(spec.ephemeral_containers),
                "volumes": spec.volumes,
            }),
        );
    }
    if let Some(status) = pod.status {
        out.insert(
            "status".into(),
            serde_json::json!({"resourceClaimStatuses": status.resource_claim_statuses}),
        );
    }
    Some(Value::Object(out))
}

fn load(storage: &Storage, graph: &Graph) -> i64 {
    let mut state = State::default();
    let mut revision = 0;
    for prefix in [PODS, PVS, ATTACHMENTS, SLICES] {
        let (items, rev) = storage.shared_list(prefix);
        revision = rev;
        for item in items {
            let value = decode_followed(&item.key, &item.value);
            graph.apply(
                &mut state,
                &String::from_utf8_lossy(&item.key),
                value.as_ref(),
            );
        }
    }
    *graph.state.write().unwrap_or_else(PoisonError::into_inner) = state;
    revision
}

async fn feed(storage: Storage, graph: Arc<Graph>) {
    let mut revisions = storage.subscribe();
    // Lists of several prefixes may see different revisions: replay from the first.
    let first = storage.current_revision();
    let loaded = load(&storage, &graph);
    let mut next = first.min(loaded) + 1;
    loop {
        match storage.shared_changes(ROOT, next, PULL) {
            Ok((changes, after)) => {
                let relevant: Vec<_> = changes.into_iter().filter(|c| followed(&c.key)).collect();
                if !relevant.is_empty() {
                    let mut state = graph.state.write().unwrap_or_else(PoisonError::into_inner);
                    for c in relevant {
                        let value = c.value.and_then(|v| decode_followed(&c.key, &v));
                        graph.apply(&mut state, &String::from_utf8_lossy(&c.key), value.as_ref());
                    }
                }
                graph.revision.send_replace(after - 1);
                next = after;
            }
            Err(_) => {
                // History compacted under us: reload.
                let first = storage.current_revision();
                let loaded = load(&storage, &graph);
                graph.revision.send_replace(first.min(loaded));
                next = first.min(loaded) + 1;
                continue;
            }
        }
        if next <= *revisions.borrow_and_update() {
            continue;
        }
        if revisions.changed().await.is_err() {
            return;
        }
    }
}

/// Upstream's node authorizer over a [`Graph`] and the static node rules.
pub struct NodeAuthorizer {
    graph: Arc<Graph>,
    rules: Vec<PolicyRule>,
}

fn allow() -> Outcome {
    Outcome {
        decision: Decision::Allow,
        reason: String::new(),
    }
}

fn no_opinion(reason: impl Into<String>) -> Outcome {
    Outcome {
        decision: Decision::NoOpinion,
        reason: reason.into(),
    }
}

/// The value an exact-match requirement on `field` asks for in a field selector.
fn selector_value<'a>(selector: &'a str, field: &str) -> Option<&'a str> {
    selector.split(',').find_map(|req| {
        let (k, v) = req
            .split_once("==")
            .or_else(|| req.split_once('='))
            .filter(|(k, _)| !k.ends_with('!'))?;
        (k.trim() == field).then_some(v.trim())
    })
}

/// The static node rules: the bootstrap `system:node` ClusterRole.
pub fn node_rules() -> Vec<PolicyRule> {
    super::bootstrap::objects()
        .into_iter()
        .find(|(key, _)| key.ends_with("/clusterroles/system:node"))
        .map(|(_, obj)| Role::from_json(&obj).rules)
        .unwrap_or_default()
}

impl NodeAuthorizer {
    /// The authorizer over `graph` with upstream's static node rules.
    pub fn new(graph: Arc<Graph>) -> NodeAuthorizer {
        NodeAuthorizer {
            graph,
            rules: node_rules(),
        }
    }

    /// The graph this authorizer consults.
    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    /// The decision for a node's request; `None` when the user is not a node.
    pub fn decide(&self, user: &UserInfo, info: &RequestInfo) -> Option<Outcome> {
        let node = node_identity(user)?;
        if node.is_empty() {
            return Some(no_opinion(format!("unknown node for user {:?}", user.name)));
        }
        if info.is_resource {
            let outcome = match (info.group.as_str(), info.resource.as_str()) {
                ("", "secrets") => Some(self.read_namespaced(node, Kind::Secret, info)),
                ("", "configmaps") => Some(self.read_namespaced(node, Kind::ConfigMap, info)),
                ("", "persistentvolumeclaims") if info.subresource == "status" => {
                    Some(self.status_update(node, Target::Ref(Kind::Pvc), info))
                }
                ("", "persistentvolumeclaims") => {
                    Some(self.get(node, Target::Ref(Kind::Pvc), info))
                }
                ("", "persistentvolumes") => Some(self.get(node, Target::Pv, info)),
                ("resource.k8s.io", "resourceclaims") => {
                    Some(self.get(node, Target::Ref(Kind::ResourceClaim), info))
                }
                ("storage.k8s.io", "volumeattachments") => {
                    Some(self.get(node, Target::VolumeAttachment, info))
                }
                ("", "serviceaccounts") => Some(self.create_token(node, info)),
                ("coordination.k8s.io", "leases") => Some(lease(node, info)),
                ("storage.k8s.io", "csinodes") => Some(csi_node(node, info)),
                ("resource.k8s.io", "resourceslices") => Some(self.resource_slice(node, info)),
                ("", "nodes") => node_object(node, info),
                ("", "pods") => self.pod(node, info),
                _ => None,
            };
            if let Some(outcome) = outcome {
                return Some(outcome);
            }
        }
        if self.rules.iter().any(|r| r.allows(info)) {
            return Some(allow());
        }
        Some(no_opinion(""))
    }

    fn related(&self, node: &str, target: Target, info: &RequestInfo) -> Outcome {
        if info.name.is_empty() {
            return no_opinion("No Object name found");
        }
        if self
            .graph
            .related(node, target, &info.namespace, &info.name)
        {
            return allow();
        }
        tracing::debug!(node, ?target, namespace = %info.namespace, name = %info.name, "NODE DENY: no relationship");
        no_opinion(format!(
            "no relationship found between node '{node}' and this object"
        ))
    }

    fn status_update(&self, node: &str, target: Target, info: &RequestInfo) -> Outcome {
        if !matches!(info.verb.as_str(), "update" | "patch") {
            return no_opinion("can only get/update/patch this type");
        }
        if info.subresource != "status" {
            return no_opinion("can only update status subresource");
        }
        self.related(node, target, info)
    }

    fn get(&self, node: &str, target: Target, info: &RequestInfo) -> Outcome {
        if info.verb != "get" {
            return no_opinion("can only get individual resources of this type");
        }
        if !info.subresource.is_empty() {
            return no_opinion("cannot get subresource");
        }
        self.related(node, target, info)
    }

    fn read_namespaced(&self, node: &str, kind: Kind, info: &RequestInfo) -> Outcome {
        if !matches!(info.verb.as_str(), "get" | "list" | "watch") {
            return no_opinion("can only read resources of this type");
        }
        if !info.subresource.is_empty() {
            return no_opinion("cannot read subresource");
        }
        if info.namespace.is_empty() {
            return no_opinion("can only read namespaced object of this type");
        }
        let mut named = info.clone();
        if named.name.is_empty() {
            // A list or watch of one object names it by field selector.
            named.name = selector_value(&info.field_selector, "metadata.name")
                .unwrap_or("")
                .to_owned();
        }
        self.related(node, Target::Ref(kind), &named)
    }

    fn create_token(&self, node: &str, info: &RequestInfo) -> Outcome {
        if info.verb != "create" || info.name.is_empty() {
            return no_opinion("can only create tokens for individual service accounts");
        }
        if info.subresource != "token" {
            return no_opinion("can only create token subresource of serviceaccount");
        }
        self.related(node, Target::Ref(Kind::ServiceAccount), info)
    }

    fn resource_slice(&self, node: &str, info: &RequestInfo) -> Outcome {
        if !info.subresource.is_empty() {
            return no_opinion("cannot authorize ResourceSlice subresources");
        }
        match info.verb.as_str() {
            "create" => allow(),
            "get" | "update" | "patch" | "delete" => {
                self.related(node, Target::ResourceSlice, info)
            }
            "watch" | "list" | "deletecollection" => {
                if selector_value(&info.field_selector, "spec.nodeName") == Some(node) {
                    allow()
                } else {
                    no_opinion(
                        "can only list/watch/deletecollection resourceslices with nodeName field selector",
                    )
                }
            }
            _ => no_opinion(
                "only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection",
            ),
        }
    }

    fn pod(&self, node: &str, info: &RequestInfo) -> Option<Outcome> {
        let outcome = match (info.subresource.as_str(), info.verb.as_str()) {
            ("", "get") => self.get(node, Target::Pod, info),
            ("", "list" | "watch") => {
                if selector_value(&info.field_selector, "spec.nodeName") == Some(node) {
                    allow()
                } else if !info.name.is_empty() {
                    self.related(node, Target::Pod, info)
                } else {
                    no_opinion("can only list/watch pods with spec.nodeName field selector")
                }
            }
            // Mirror pods; NodeRestriction admission limits them to the node itself.
            ("", "create" | "delete") => allow(),
            ("status", "update" | "patch") => allow(),
            ("eviction", "create") => allow(),
            _ => no_opinion(""),
        };
        Some(outcome)
    }
}

fn node_object(node: &str, info: &RequestInfo) -> Option<Outcome> {
    let outcome = match (info.subresource.as_str(), info.verb.as_str()) {
        // NodeRestriction admission limits a node to its own Node object.
        ("", "create" | "update" | "patch") => allow(),
        ("", "get" | "list" | "watch") => {
            let name = if info.name.is_empty() {
                selector_value(&info.field_selector, "metadata.name").unwrap_or("")
            } else {
                info.name.as_str()
            };
            if name == node {
                allow()
            } else if name.is_empty() {
                no_opinion(format!(
                    "node '{node}' cannot read all nodes, only its own Node object"
                ))
            } else {
                no_opinion(format!(
                    "node '{node}' cannot read '{name}', only its own Node object"
                ))
            }
        }
        ("status", "update" | "patch") => allow(),
        _ => no_opinion(""),
    };
    Some(outcome)
}

fn lease(node: &str, info: &RequestInfo) -> Outcome {
    if !matches!(
        info.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no_opinion("can only get, create, update, patch, or delete a node lease");
    }
    if info.namespace != NODE_LEASE_NAMESPACE {
        return no_opinion(format!(
            "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
        ));
    }
    if info.verb != "create" && info.name != node {
        return no_opinion("can only access node lease with the same name as the requesting node");
    }
    allow()
}

fn csi_node(node: &str, info: &RequestInfo) -> Outcome {
    if !matches!(
        info.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no_opinion("can only get, create, update, patch, or delete a CSINode");
    }
    if !info.subresource.is_empty() {
        return no_opinion("cannot authorize CSINode subresources");
    }
    if info.verb != "create" && info.name != node {
        return no_opinion("can only access CSINode with the same name as the requesting node");
    }
    allow()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use serde_json::json;

    #[test]
    fn decoding_a_pod_for_the_graph_keeps_every_reference() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "ns", "managedFields": [{"manager": "m"}]},
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "sa",
                "imagePullSecrets": [{"name": "pull"}],
                "initContainers": [{"name": "i", "image": "x",
                    "envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
                "containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80}],
                    "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-s", "key": "k"}}}],
                    "envFrom": [{"secretRef": {"name": "from-s"}}]}],
                "ephemeralContainers": [{"name": "e", "image": "x",
                    "env": [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "eph-cm", "key": "k"}}}]}],
                "volumes": [
                    {"name": "v1", "secret": {"secretName": "vol-s"}},
                    {"name": "v2", "projected": {"sources": [{"configMap": {"name": "proj-cm"}}]}},
                    {"name": "v3", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "v4", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                ],
            },
            "status": {"phase": "Running", "resourceClaimStatuses": [{"name": "r", "resourceClaimName": "claim-1"}]},
        });
        let bytes = serde_json::to_vec(&pod).unwrap_or_default();
        let key = format!("{PODS}ns/p");
        let decoded = decode_followed(key.as_bytes(), &bytes);
        let decoded = decoded.as_ref().unwrap_or(&Value::Null);
        let mut full = collect_refs(&pod);
        let mut kept = collect_refs(decoded);
        full.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        kept.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        assert_eq!(full.len(), 11, "{full:?}");
        assert_eq!(kept, full);
        assert_eq!(str_at(decoded, &["spec", "nodeName"]), "n1");
    }

    fn node_user(name: &str) -> UserInfo {
        UserInfo {
            name: format!("system:node:{name}"),
            groups: vec![NODES_GROUP.into(), "system:authenticated".into()],
            ..UserInfo::default()
        }
    }

    fn req(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        RequestInfo::parse(method, path, query)
    }

    fn authorizer_with(objects: &[(&str, Value)]) -> NodeAuthorizer {
        let graph = Graph::empty();
        {
            let mut state = graph.state.write().unwrap();
            for (key, obj) in objects {
                graph.apply(&mut state, key, Some(obj));
            }
        }
        NodeAuthorizer::new(graph)
    }

    #[test]
    fn only_users_in_the_nodes_group_are_nodes() {
        assert_eq!(node_identity(&node_user("n1")), Some("n1"));
        let mut not_in_group = node_user("n1");
        not_in_group.groups.clear();
        assert_eq!(node_identity(&not_in_group), None);
        let other = UserInfo {
            name: "alice".into(),
            groups: vec![NODES_GROUP.into()],
            ..UserInfo::default()
        };
        assert_eq!(node_identity(&other), None);
    }

    #[test]
    fn secrets_of_pods_bound_to_the_node_are_readable() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "app",
                "containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "db", "key": "k"}}}]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}, {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
            }
        });
        let pv = json!({"metadata": {"name": "pv1"}, "spec": {"claimRef": {"namespace": "default", "name": "data"}, "csi": {"driver": "d", "volumeHandle": "h", "nodePublishSecretRef": {"name": "csi-creds"}}}});
        let a = authorizer_with(&[
            ("/registry/core/pods/default/web", pod),
            ("/registry/core/persistentvolumes/pv1", pv),
        ]);
        let n1 = node_user("n1");
        let n2 = node_user("n2");
        let get = |path: &str| req(&Method::GET, path, None);
        let decide = |u: &UserInfo, i: &RequestInfo| a.decide(u, i).unwrap().decision;
        for path in [
            "/api/v1/namespaces/default/secrets/db",
            "/api/v1/namespaces/default/configmaps/settings",
            "/api/v1/namespaces/default/persistentvolumeclaims/data",
            "/api/v1/persistentvolumes/pv1",
            "/api/v1/namespaces/default/secrets/csi-creds",
            "/api/v1/namespaces/default/pods/web",
        ] {
            assert_eq!(decide(&n1, &get(path)), Decision::Allow, "{path}");
            assert_eq!(decide(&n2, &get(path)), Decision::NoOpinion, "{path}");
        }
        let other = a
            .decide(&n2, &get("/api/v1/namespaces/default/secrets/db"))
            .unwrap();
        assert_eq!(
            other.reason,
            "no relationship found between node 'n2' and this object"
        );
        let token = req(
            &Method::POST,
            "/api/v1/namespaces/default/serviceaccounts/app/token",
            None,
        );
        assert_eq!(decide(&n1, &token), Decision::Allow);
        assert_eq!(decide(&n2, &token), Decision::NoOpinion);
        let list = req(&Method::GET, "/api/v1/namespaces/default/secrets", None);
        assert_eq!(decide(&n1, &list), Decision::NoOpinion);
    }

    #[test]
    fn nodes_read_their_own_node_and_pods_by_field_selector() {
        let a = authorizer_with(&[]);
        let n1 = node_user("n1");
        let own = a
            .decide(&n1, &req(&Method::GET, "/api/v1/nodes/n1", None))
            .unwrap();
        assert_eq!(own.decision, Decision::Allow);
        let all = a
            .decide(&n1, &req(&Method::GET, "/api/v1/nodes", None))
            .unwrap();
        assert_eq!(
            all.reason,
            "node 'n1' cannot read all nodes, only its own Node object"
        );
        let by_name = req(
            &Method::GET,
            "/api/v1/nodes",
            Some("fieldSelector=metadata.name%3Dn1&watch=true"),
        );
        assert_eq!(a.decide(&n1, &by_name).unwrap().decision, Decision::Allow);
        let pods = req(
            &Method::GET,
            "/api/v1/pods",
            Some("fieldSelector=spec.nodeName%3Dn1"),
        );
        assert_eq!(a.decide(&n1, &pods).unwrap().decision, Decision::Allow);
        let all_pods = a
            .decide(&n1, &req(&Method::GET, "/api/v1/pods", None))
            .unwrap();
        assert_eq!(
            all_pods.reason,
            "can only list/watch pods with spec.nodeName field selector"
        );
        let lease = req(
            &Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2",
            None,
        );
        assert_eq!(
            a.decide(&n1, &lease).unwrap().reason,
            "can only access node lease with the same name as the requesting node"
        );
        let events = req(&Method::POST, "/api/v1/namespaces/default/events", None);
        assert_eq!(a.decide(&n1, &events).unwrap().decision, Decision::Allow);
        let ns = req(&Method::POST, "/api/v1/namespaces", None);
        assert_eq!(a.decide(&n1, &ns).unwrap().decision, Decision::NoOpinion);
    }

    #[test]
    fn unbinding_a_pod_removes_its_edges() {
        let graph = Graph::empty();
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1", "volumes": [{"name": "s", "secret": {"secretName": "s1"}}]}});
        let mut state = graph.state.write().unwrap();
        graph.apply(&mut state, "/registry/core/pods/ns/p", Some(&pod));
        assert!(state.related("n1", Target::Ref(Kind::Secret), "ns", "s1"));
        graph.apply(&mut state, "/registry/core/pods/ns/p", None);
        assert!(!state.related("n1", Target::Ref(Kind::Secret), "ns", "s1"));
        assert!(state.referenced.is_empty());
    }
}
