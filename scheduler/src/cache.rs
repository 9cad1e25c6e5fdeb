//! The scheduler's view of the cluster, fed by kube-rs watchers of Nodes and Pods: one
//! precomputed [`NodeInfo`] per node (allocatable, requested, pods, ports), the assigned pods
//! by key, and the pods assumed on a node while their binding is in flight, so two pods never
//! take the same capacity. Pods are kept as light [`PodInfo`]s, never as whole objects.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm, Taint};

use crate::framework::resources::{Resources, pod_requests};
use crate::framework::selector::{Labels, Selector};

/// `namespace/name`, the key pods are known by.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// A host port a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The host IP (`0.0.0.0` when unset).
    pub ip: String,
    /// The port.
    pub port: i32,
}

impl HostPort {
    /// True when the two ports cannot both be bound on one node.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// One parsed pod (anti-)affinity term.
#[derive(Debug, Clone)]
pub struct AffinityTerm {
    /// Which pods the term is about.
    pub selector: Selector,
    /// The namespaces it applies to (empty with `all_namespaces`).
    pub namespaces: Vec<String>,
    /// An empty `namespaceSelector` selects every namespace.
    pub all_namespaces: bool,
    /// The topology domain key.
    pub topology_key: String,
    /// The weight (preferred terms); 1 for required terms.
    pub weight: i64,
}

impl AffinityTerm {
    fn parse(t: &PodAffinityTerm, ns: &str, labels: &Labels, weight: i64) -> AffinityTerm {
        let mut selector = Selector::new(t.label_selector.as_ref());
        for key in t.match_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                selector.require(key, v);
            }
        }
        let mut namespaces = t.namespaces.clone().unwrap_or_default();
        let all_namespaces = t.namespace_selector.as_ref().is_some_and(|s| {
            s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && s.match_expressions.as_ref().is_none_or(|m| m.is_empty())
        });
        if namespaces.is_empty() && t.namespace_selector.is_none() {
            namespaces.push(ns.to_owned());
        }
        AffinityTerm {
            selector,
            namespaces,
            all_namespaces,
            topology_key: t.topology_key.clone(),
            weight,
        }
    }

    /// True when the term selects a pod in namespace `ns` with `labels`.
    pub fn matches(&self, ns: &str, labels: &Labels) -> bool {
        (self.all_namespaces || self.namespaces.iter().any(|n| n == ns))
            && self.selector.matches(labels)
    }
}

/// A pod's inter-pod affinity, parsed once.
#[derive(Debug, Clone, Default)]
pub struct PodAffinity {
    /// `requiredDuringScheduling` affinity terms.
    pub required_affinity: Vec<AffinityTerm>,
    /// `requiredDuringScheduling` anti-affinity terms.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// Preferred affinity terms with their weights.
    pub preferred_affinity: Vec<AffinityTerm>,
    /// Preferred anti-affinity terms with their weights.
    pub preferred_anti_affinity: Vec<AffinityTerm>,
}

impl PodAffinity {
    /// Parses a pod's affinity; `None` when it has no pod (anti-)affinity at all.
    pub fn of(pod: &Pod) -> Option<PodAffinity> {
        let aff = pod.spec.as_ref()?.affinity.as_ref()?;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let empty = Labels::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let mut out = PodAffinity::default();
        if let Some(a) = &aff.pod_affinity {
            for t in a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.required_affinity
                    .push(AffinityTerm::parse(t, ns, labels, 1));
            }
            for w in a
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.preferred_affinity.push(AffinityTerm::parse(
                    &w.pod_affinity_term,
                    ns,
                    labels,
                    i64::from(w.weight),
                ));
            }
        }
        if let Some(a) = &aff.pod_anti_affinity {
            for t in a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.required_anti_affinity
                    .push(AffinityTerm::parse(t, ns, labels, 1));
            }
            for w in a
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.preferred_anti_affinity.push(AffinityTerm::parse(
                    &w.pod_affinity_term,
                    ns,
                    labels,
                    i64::from(w.weight),
                ));
            }
        }
        let any = !(out.required_affinity.is_empty()
            && out.required_anti_affinity.is_empty()
            && out.preferred_affinity.is_empty()
            && out.preferred_anti_affinity.is_empty());
        any.then_some(out)
    }
}

/// What the scheduler keeps of a pod that is on a node (or assumed there).
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Labels.
    pub labels: Labels,
    /// The node it is on (or assumed on).
    pub node: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Requests counted against the node.
    pub requests: Resources,
    /// CPU for scoring.
    pub non_zero_cpu: i64,
    /// Memory for scoring.
    pub non_zero_memory: i64,
    /// Host ports it holds.
    pub ports: Vec<HostPort>,
    /// Its inter-pod affinity, when it has any.
    pub affinity: Option<Arc<PodAffinity>>,
    /// It has a deletion timestamp.
    pub terminating: bool,
    /// `status.startTime` (or creation time), RFC 3339, for preemption's ordering.
    pub start_time: String,
}

/// The host ports a pod's containers (and init containers) ask for.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return vec![];
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| HostPort {
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            ip: p
                .host_ip
                .clone()
                .filter(|i| !i.is_empty())
                .unwrap_or_else(|| "0.0.0.0".to_owned()),
            port: p.host_port.unwrap_or(0),
        })
        .collect()
}

impl PodInfo {
    /// Extracts what the scheduler needs from `pod`, placed on `node`.
    pub fn new(pod: &Pod, node: &str) -> PodInfo {
        let req = pod.spec.as_ref().map(pod_requests).unwrap_or_default();
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .or(pod.metadata.creation_timestamp.as_ref())
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        PodInfo {
            key: pod_key(pod),
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            node: node.to_owned(),
            priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
            requests: req.requests,
            non_zero_cpu: req.non_zero_cpu,
            non_zero_memory: req.non_zero_memory,
            ports: host_ports(pod),
            affinity: PodAffinity::of(pod).map(Arc::new),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            start_time,
        }
    }
}

/// A node with everything the filters and scores need precomputed.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Node labels.
    pub labels: Labels,
    /// Its `kubernetes.io/hostname` label, kept apart: the default spreading constraints read
    /// it (and the zone) for every node of every attempt.
    pub hostname: Option<String>,
    /// Its `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `status.allocatable` (without pods).
    pub allocatable: Resources,
    /// `status.allocatable.pods`.
    pub allowed_pods: i64,
    /// Sum of the requests of its pods.
    pub requested: Resources,
    /// Sum of its pods' CPU for scoring.
    pub non_zero_cpu: i64,
    /// Sum of its pods' memory for scoring.
    pub non_zero_memory: i64,
    /// Its pods (bound or assumed).
    pub pods: Vec<Arc<PodInfo>>,
    /// Host ports in use.
    pub ports: Vec<HostPort>,
    /// Hash of the fields scheduling depends on, to tell relevant updates from heartbeats.
    pub sched_hash: u64,
    /// Matching-pod counts already computed for this node's current pods, by selector
    /// fingerprint (see [`NodeInfo::memo_count`]); emptied whenever its pods change.
    pub match_memo: MatchMemo,
}

/// Memoized per-node counts of pods matching a selector, so PodTopologySpread does not
/// re-match every pod of every node for each pod it scores (the counts only change on the
/// node that gains or loses a pod). A few entries at most: a short list beats hashing.
#[derive(Debug, Default)]
pub struct MatchMemo(std::sync::Mutex<Vec<(u64, i64)>>);

impl Clone for MatchMemo {
    fn clone(&self) -> Self {
        MatchMemo(std::sync::Mutex::new(self.lock().clone()))
    }
}

impl MatchMemo {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, i64)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn clear(&self) {
        self.lock().clear();
    }
}

/// The well-known hostname label.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The well-known zone label.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

fn label(node: &Node, key: &str) -> Option<String> {
    node.metadata.labels.as_ref()?.get(key).cloned()
}

/// A topology key resolved once per attempt: the hostname and zone (the keys of the system
/// default spreading) read [`NodeInfo`]'s own fields, any other key its labels.
#[derive(Debug, Clone, Copy)]
pub enum TopologyKey<'a> {
    /// `kubernetes.io/hostname`.
    Hostname,
    /// `topology.kubernetes.io/zone`.
    Zone,
    /// Any other label.
    Other(&'a str),
}

impl<'a> TopologyKey<'a> {
    /// Resolves `key`.
    pub fn new(key: &'a str) -> TopologyKey<'a> {
        match key {
            HOSTNAME_LABEL => TopologyKey::Hostname,
            ZONE_LABEL => TopologyKey::Zone,
            other => TopologyKey::Other(other),
        }
    }

    /// The node's value for this key, if it has the label.
    pub fn value<'n>(&self, n: &'n NodeInfo) -> Option<&'n str> {
        match self {
            TopologyKey::Hostname => n.hostname.as_deref(),
            TopologyKey::Zone => n.zone.as_deref(),
            TopologyKey::Other(k) => n.labels.get(*k).map(String::as_str),
        }
    }
}

impl NodeInfo {
    /// Builds the node part (no pods) from a Node object.
    pub fn from_node(node: &Node) -> NodeInfo {
        let spec = node.spec.as_ref();
        let alloc = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
        let allowed_pods = alloc
            .and_then(|a| a.get("pods"))
            .map(|q| crate::framework::resources::parse_units(&q.0))
            .unwrap_or(0);
        let mut n = NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            hostname: label(node, HOSTNAME_LABEL),
            zone: label(node, ZONE_LABEL),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable: alloc.map(Resources::from_list).unwrap_or_default(),
            allowed_pods,
            ..Default::default()
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        n.labels.hash(&mut h);
        for t in &n.taints {
            (&t.key, &t.value, &t.effect).hash(&mut h);
        }
        n.unschedulable.hash(&mut h);
        format!("{:?}{}", n.allocatable, n.allowed_pods).hash(&mut h);
        n.sched_hash = h.finish();
        n
    }

    /// Accounts for a pod on this node.
    pub fn add_pod(&mut self, p: Arc<PodInfo>) {
        self.requested.add(&p.requests);
        self.non_zero_cpu += p.non_zero_cpu;
        self.non_zero_memory += p.non_zero_memory;
        self.ports.extend(p.ports.iter().cloned());
        self.pods.push(p);
        self.match_memo.clear();
    }

    /// The count `compute` gives for this node's current pods, computed once per
    /// `fingerprint` (which must identify everything `compute` depends on besides the pods).
    pub fn memo_count(&self, fingerprint: u64, compute: impl FnOnce(&NodeInfo) -> i64) -> i64 {
        if let Some((_, n)) = self
            .match_memo
            .lock()
            .iter()
            .find(|(f, _)| *f == fingerprint)
        {
            return *n;
        }
        let n = compute(self);
        let mut memo = self.match_memo.lock();
        if memo.len() >= 16 {
            memo.clear();
        }
        memo.push((fingerprint, n));
        n
    }

    /// Removes a pod's accounting; returns it when it was there.
    pub fn remove_pod(&mut self, key: &str) -> Option<Arc<PodInfo>> {
        let i = self.pods.iter().position(|p| p.key == key)?;
        let p = self.pods.swap_remove(i);
        self.match_memo.clear();
        self.requested.sub(&p.requests);
        self.non_zero_cpu -= p.non_zero_cpu;
        self.non_zero_memory -= p.non_zero_memory;
        for port in &p.ports {
            if let Some(j) = self.ports.iter().position(|q| q == port) {
                self.ports.swap_remove(j);
            }
        }
        Some(p)
    }
}

/// A pod nominated to a node by preemption, whose resources others must leave free.
#[derive(Debug, Clone)]
pub struct Nominated {
    /// The node.
    pub node: String,
    /// Its priority.
    pub priority: i32,
    /// Its requests.
    pub requests: Resources,
}

/// Nodes and the pods on them, as the scheduler sees them.
#[derive(Debug, Default)]
pub struct Cache {
    /// Every node, in a stable order (the filter walk rotates over it).
    pub nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    /// Assigned (or assumed) pods by key.
    pub pods: HashMap<String, Arc<PodInfo>>,
    /// Keys of pods assumed while their binding is in flight.
    pub assumed: HashSet<String>,
    /// Pods bound to nodes not (yet) known, by node name.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Keys of assigned pods with any inter-pod affinity term.
    pub with_affinity: HashSet<String>,
    /// Pods nominated to nodes by preemption, by key.
    pub nominated: HashMap<String, Nominated>,
}

/// What a node event changed, for the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChange {
    /// A node appeared.
    Added,
    /// Something scheduling looks at changed.
    Updated,
    /// Only status noise (heartbeats, conditions).
    Unchanged,
}

impl Cache {
    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }

    fn node_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        self.index.get(name).map(|i| &mut self.nodes[*i])
    }

    /// Adds or updates a node, keeping its pods.
    pub fn upsert_node(&mut self, node: &Node) -> NodeChange {
        let mut fresh = NodeInfo::from_node(node);
        if let Some(i) = self.index.get(&fresh.name).copied() {
            let old = &mut self.nodes[i];
            if old.sched_hash == fresh.sched_hash {
                return NodeChange::Unchanged;
            }
            fresh.pods = std::mem::take(&mut old.pods);
            fresh.match_memo = std::mem::take(&mut old.match_memo);
            fresh.requested = old.requested.clone();
            fresh.non_zero_cpu = old.non_zero_cpu;
            fresh.non_zero_memory = old.non_zero_memory;
            fresh.ports = std::mem::take(&mut old.ports);
            *old = fresh;
            NodeChange::Updated
        } else {
            if let Some(pods) = self.orphans.remove(&fresh.name) {
                for p in pods {
                    fresh.add_pod(p);
                }
            }
            self.index.insert(fresh.name.clone(), self.nodes.len());
            self.nodes.push(fresh);
            NodeChange::Added
        }
    }

    /// Removes a node; its pods wait as orphans until it comes back or they go.
    pub fn remove_node(&mut self, name: &str) {
        let Some(i) = self.index.remove(name) else {
            return;
        };
        let node = self.nodes.swap_remove(i);
        if i < self.nodes.len() {
            let moved = self.nodes[i].name.clone();
            self.index.insert(moved, i);
        }
        if !node.pods.is_empty() {
            self.orphans.insert(node.name, node.pods);
        }
    }

    /// Names of every known node.
    pub fn node_names(&self) -> HashSet<String> {
        self.index.keys().cloned().collect()
    }

    /// Records an assigned pod (from the watch), replacing any earlier or assumed copy.
    pub fn set_pod(&mut self, info: PodInfo) {
        let key = info.key.clone();
        self.assumed.remove(&key);
        self.nominated.remove(&key);
        self.remove_pod(&key);
        let info = Arc::new(info);
        if info.affinity.is_some() {
            self.with_affinity.insert(key.clone());
        }
        self.pods.insert(key, info.clone());
        let node = info.node.clone();
        match self.node_mut(&node) {
            Some(n) => n.add_pod(info),
            None => self.orphans.entry(node).or_default().push(info),
        }
    }

    /// Assumes `info` on its node while its binding is in flight.
    pub fn assume(&mut self, info: PodInfo) {
        let key = info.key.clone();
        self.set_pod(info);
        self.assumed.insert(key);
    }

    /// Forgets a pod (deleted, finished, or a failed binding); returns what was removed.
    pub fn remove_pod(&mut self, key: &str) -> Option<Arc<PodInfo>> {
        self.assumed.remove(key);
        self.with_affinity.remove(key);
        let p = self.pods.remove(key)?;
        if let Some(n) = self.node_mut(&p.node) {
            n.remove_pod(key);
        } else if let Some(list) = self.orphans.get_mut(&p.node) {
            list.retain(|q| q.key != key);
        }
        Some(p)
    }

    /// True when the pod is known as assigned or assumed.
    pub fn has_pod(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, PodSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn node(name: &str, cpu: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity(cpu.into())),
                    ("pods".to_owned(), Quantity("110".into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            ..Default::default()
        }
    }

    #[test]
    fn assumed_pods_count_until_forgotten_and_heartbeats_are_unchanged() {
        let mut c = Cache::default();
        assert_eq!(c.upsert_node(&node("a", "4")), NodeChange::Added);
        assert_eq!(c.upsert_node(&node("a", "4")), NodeChange::Unchanged);
        c.assume(PodInfo::new(&pod("p"), "a"));
        assert_eq!(c.node("a").map(|n| n.pods.len()), Some(1));
        assert!(c.assumed.contains("default/p"));
        assert_eq!(c.upsert_node(&node("a", "8")), NodeChange::Updated);
        assert_eq!(c.node("a").map(|n| n.pods.len()), Some(1));
        c.remove_pod("default/p");
        assert_eq!(c.node("a").map(|n| n.pods.len()), Some(0));
    }

    #[test]
    fn pods_bound_to_unknown_nodes_join_them_when_they_appear() {
        let mut c = Cache::default();
        c.set_pod(PodInfo::new(&pod("p"), "late"));
        c.upsert_node(&node("late", "1"));
        assert_eq!(c.node("late").map(|n| n.pods.len()), Some(1));
        c.upsert_node(&node("other", "1"));
        c.remove_node("late");
        assert!(c.node("other").is_some());
        assert!(c.node("late").is_none());
    }
}
