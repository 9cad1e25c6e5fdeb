//! The garbage collector (upstream's `pkg/controller/garbagecollector`): a graph of
//! ownerReferences over every listable, watchable, deletable resource (found by discovery,
//! refreshed every 30 s), kept by watches; dependents of deleted owners are deleted
//! (background), owners deleted in the foreground keep their `foregroundDeletion` finalizer
//! until no dependent with `blockOwnerDeletion` remains, owners deleted with `orphan` get their
//! dependents' references removed before the finalizer goes, and references to owners that
//! are missing or have another uid are dangling.

pub(crate) mod resources;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{
    DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::discovery::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, ReconcileError};
use crate::queue::{self, Queue, SyncResult};
use resources::Resource;

/// `--concurrent-gc-syncs`.
const WORKERS: usize = 20;
/// How often discovery is refreshed to start monitors for new resources (upstream resyncs
/// every 30 s; new custom resources are collected sooner this way).
const DISCOVERY_PERIOD: Duration = Duration::from_secs(10);
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// Starts the garbage collector.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> crate::LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// One object in the graph.
#[derive(Clone, Debug)]
struct Node {
    resource: usize,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
    finalizers: Vec<String>,
}

/// A uid in 16 bytes: the canonical (lower-case, hyphenated) UUID form every uid the API
/// server assigns has. Other uids stay strings (their objects get a full [`Node`]).
type CompactUid = [u8; 16];

/// `uid` as a [`CompactUid`] when it is a canonical UUID (so it converts back unchanged).
fn compact_uid(uid: &str) -> Option<CompactUid> {
    let parsed = uuid::Uuid::try_parse(uid).ok()?;
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    (parsed.hyphenated().encode_lower(&mut buf) == uid).then(|| *parsed.as_bytes())
}

/// The uid string of a [`CompactUid`].
fn uid_string(uid: &CompactUid) -> String {
    uuid::Uuid::from_bytes(*uid).hyphenated().to_string()
}

/// The graph of ownerReferences. Objects with ownerReferences, or being deleted, are
/// [`Node`]s; every other object (no owners, not deleting: most of a cluster, e.g. a
/// namespace's ConfigMaps) is only a 16-byte uid and its resource in `plain`, as nothing is
/// ever done to it by uid: it matters to the collector only as a live owner (whose
/// dependents' ownerReferences are not dangling) and, when it goes, through `dependents`.
#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    /// Live objects without ownerReferences: compact uid → resource index.
    plain: HashMap<CompactUid, u16>,
    dependents: HashMap<String, HashSet<String>>,
    resources: Vec<Resource>,
    /// What the graph holds of each resource (same index as `resources`), for `/metrics`.
    usage: Vec<Arc<lean::caches::CacheUsage>>,
}

/// Bytes a `plain` entry takes in the graph, estimated: the pair and hashbrown's control
/// byte, at its usual load.
const PLAIN_BYTES: usize = (std::mem::size_of::<(CompactUid, u16)>() + 1) * 8 / 7;

/// Bytes a node takes in the graph, estimated: its strings plus the map's and the struct's
/// fixed parts.
fn node_bytes(uid_len: usize, n: &Node) -> usize {
    let owners: usize = n
        .owners
        .iter()
        .map(|o| {
            std::mem::size_of::<OwnerReference>()
                + o.api_version.len()
                + o.kind.len()
                + o.name.len()
                + o.uid.len()
        })
        .sum();
    let finalizers: usize = n
        .finalizers
        .iter()
        .map(|f| std::mem::size_of::<String>() + f.len())
        .sum();
    std::mem::size_of::<(String, Node)>()
        + uid_len
        + n.namespace.as_ref().map_or(0, String::len)
        + n.name.len()
        + owners
        + finalizers
}

impl Graph {
    /// Records the object `uid` of `resource` as it is now: a `plain` entry when it has no
    /// owners and is not being deleted (and its uid is a canonical UUID), else a node.
    fn insert(&mut self, uid: String, node: Node) {
        if node.owners.is_empty()
            && !node.deleting
            && let (Some(key), Ok(resource)) = (compact_uid(&uid), u16::try_from(node.resource))
        {
            if let Some(u) = self.usage.get(node.resource) {
                u.add(PLAIN_BYTES);
            }
            self.plain.insert(key, resource);
            return;
        }
        self.insert_node(uid, node);
    }

    /// Forgets the object `uid`; returns its owners when it was known (empty for a `plain`
    /// entry) and its node, if it had one.
    fn remove(&mut self, uid: &str) -> Option<Vec<OwnerReference>> {
        if let Some(node) = self.remove_node(uid) {
            return Some(node.owners);
        }
        let key = compact_uid(uid)?;
        let resource = self.plain.remove(&key)?;
        if let Some(u) = self.usage.get(usize::from(resource)) {
            u.remove(PLAIN_BYTES);
        }
        Some(Vec::new())
    }

    /// Whether `uid` is an object the graph knows that is not being deleted.
    fn is_live(&self, uid: &str) -> bool {
        match self.nodes.get(uid) {
            Some(n) => !n.deleting,
            None => compact_uid(uid).is_some_and(|k| self.plain.contains_key(&k)),
        }
    }

    /// Inserts (or replaces) a node, keeping the usage figures.
    fn insert_node(&mut self, uid: String, node: Node) {
        let uid_len = uid.len();
        if let Some(u) = self.usage.get(node.resource) {
            u.add(node_bytes(uid_len, &node));
        }
        if let Some(old) = self.nodes.insert(uid, node) {
            self.forget_usage(uid_len, &old);
        }
    }

    /// Removes a node, keeping the usage figures.
    fn remove_node(&mut self, uid: &str) -> Option<Node> {
        let node = self.nodes.remove(uid)?;
        self.forget_usage(uid.len(), &node);
        Some(node)
    }

    fn forget_usage(&self, uid_len: usize, node: &Node) {
        if let Some(u) = self.usage.get(node.resource) {
            u.remove(node_bytes(uid_len, node));
        }
    }

    fn resource_for(&self, api_version: &str, kind: &str) -> Option<usize> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.resources
            .iter()
            .position(|r| r.ar.group == group && r.ar.kind == kind)
    }

    fn unlink(&mut self, uid: &str, owners: &[OwnerReference]) {
        for o in owners {
            if let Some(set) = self.dependents.get_mut(&o.uid) {
                set.remove(uid);
                if set.is_empty() {
                    self.dependents.remove(&o.uid);
                }
            }
        }
    }
}

struct Shared {
    ctx: Context,
    graph: Mutex<Graph>,
    queue: Queue,
}

impl Shared {
    fn graph(&self) -> std::sync::MutexGuard<'_, Graph> {
        self.graph
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Removes the nodes of `resource` a re-list did not return, waking their dependents.
    fn forget_missing(&self, resource: usize, seen: &HashSet<String>) {
        let mut wake = Vec::new();
        {
            let mut g = self.graph();
            let mut gone: Vec<String> = g
                .nodes
                .iter()
                .filter(|(uid, n)| n.resource == resource && !seen.contains(*uid))
                .map(|(uid, _)| uid.clone())
                .collect();
            gone.extend(
                g.plain
                    .iter()
                    .filter(|(_, r)| usize::from(**r) == resource)
                    .map(|(k, _)| uid_string(k))
                    .filter(|uid| !seen.contains(uid)),
            );
            for uid in gone {
                if let Some(owners) = g.remove(&uid) {
                    g.unlink(&uid, &owners);
                    wake.extend(owners.iter().map(|o| o.uid.clone()));
                }
                if let Some(deps) = g.dependents.get(&uid) {
                    wake.extend(deps.iter().cloned());
                }
            }
        }
        for w in wake {
            self.queue.add(w);
        }
    }

    /// Applies a watch event to the graph and queues the work it implies.
    fn observe(&self, resource: usize, ev: &Event<Observed>) {
        let (obj, deleted) = match ev {
            Event::Apply(o) | Event::InitApply(o) => (o, false),
            Event::Delete(o) => (o, true),
            Event::Init | Event::InitDone => return,
        };
        let Some(uid) = obj.metadata.uid.clone() else {
            return;
        };
        let owners = obj.metadata.owner_references.clone().unwrap_or_default();
        let mut wake: Vec<String> = Vec::new();
        {
            let mut g = self.graph();
            let old = g.remove(&uid);
            if let Some(old) = &old {
                g.unlink(&uid, old);
            }
            if deleted {
                // Dependents of a gone owner may be garbage; owners waiting on it may finish.
                if let Some(deps) = g.dependents.get(&uid) {
                    wake.extend(deps.iter().cloned());
                }
                wake.extend(owners.iter().map(|o| o.uid.clone()));
            } else {
                let node = Node {
                    resource,
                    namespace: obj.metadata.namespace.clone(),
                    name: obj.metadata.name.clone().unwrap_or_default(),
                    owners: owners.clone(),
                    deleting: obj.metadata.deletion_timestamp.is_some(),
                    finalizers: obj.metadata.finalizers.clone().unwrap_or_default(),
                };
                for o in &owners {
                    g.dependents
                        .entry(o.uid.clone())
                        .or_default()
                        .insert(uid.clone());
                }
                // Look at the object when an owner is unknown to the graph (maybe gone) or
                // being deleted, as upstream's virtual nodes and owner-change checks.
                let owners_changed = old.as_ref().is_none_or(|o| *o != owners);
                let suspicious = owners.iter().any(|o| !g.is_live(&o.uid));
                if owners_changed && suspicious {
                    wake.push(uid.clone());
                }
                if node.deleting
                    && (node
                        .finalizers
                        .iter()
                        .any(|f| f == FOREGROUND || f == ORPHAN))
                {
                    wake.push(uid.clone());
                }
                if node.deleting {
                    // Owners deleting in the foreground re-check their blocking dependents.
                    wake.extend(owners.iter().map(|o| o.uid.clone()));
                }
                g.insert(uid.clone(), node);
            }
        }
        for w in wake {
            self.queue.add(w);
        }
    }
}

async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let shared = Arc::new(Shared {
        ctx: ctx.clone(),
        graph: Mutex::new(Graph::default()),
        queue: Queue::default(),
    });
    // Monitors: one watch per resource, started as discovery finds resources.
    let s = shared.clone();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let mut watching: HashSet<(String, String)> = HashSet::new();
        loop {
            match resources::discover(&s.ctx.client).await {
                Ok(all) => {
                    for r in resources::deletable(&all) {
                        let id = (r.ar.group.clone(), r.ar.plural.clone());
                        if !watching.insert(id) {
                            continue;
                        }
                        let idx = {
                            let mut g = s.graph();
                            let name = if r.ar.group.is_empty() {
                                r.ar.plural.clone()
                            } else {
                                format!("{}.{}", r.ar.plural, r.ar.group)
                            };
                            g.usage.push(lean::caches::cache("garbage-collector", name));
                            g.resources.push(r.clone());
                            g.resources.len() - 1
                        };
                        spawn_monitor(s.clone(), idx, r.ar.clone(), token.clone());
                    }
                }
                Err(e) => tracing::warn!(error = %e, "garbage collector discovery failed"),
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(DISCOVERY_PERIOD) => {}
            }
        }
    });
    let queue = shared.queue.clone();
    queue::run_workers(&ctx, &queue, WORKERS, &shutdown, move |uid| {
        let s = shared.clone();
        async move { process(&s, &uid).await }
    })
    .await;
    Ok(())
}

/// What the graph reads of a watched object: its metadata. Watch events decode into this
/// rather than a `DynamicObject` (whose flattened fields buffer the whole object, then build
/// it as a JSON tree): spec, status and managed fields are skipped unparsed. Pods pass here
/// on every write.
#[derive(Clone, Debug, serde::Deserialize)]
struct Observed {
    #[serde(default, deserialize_with = "lean::meta")]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
}

impl kube::Resource for Observed {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.metadata
    }
}

fn spawn_monitor(s: Arc<Shared>, idx: usize, ar: ApiResource, token: CancellationToken) {
    tokio::spawn(async move {
        let api: Api<Observed> = Api::all_with(s.ctx.client.clone(), &ar);
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        futures_util::pin_mut!(stream);
        // Uids seen by the current (re-)list: objects of this resource missing from it were
        // deleted while the watch was down (upstream's DeletedFinalStateUnknown).
        let mut relist: Option<HashSet<String>> = None;
        loop {
            let ev = tokio::select! {
                () = token.cancelled() => return,
                ev = stream.next() => ev,
            };
            match ev {
                None => return,
                Some(Ok(ev)) => {
                    match &ev {
                        Event::Init => relist = Some(HashSet::new()),
                        Event::InitApply(o) => {
                            if let (Some(seen), Some(uid)) = (relist.as_mut(), &o.metadata.uid) {
                                seen.insert(uid.clone());
                            }
                        }
                        Event::InitDone => {
                            if let Some(seen) = relist.take() {
                                s.forget_missing(idx, &seen);
                            }
                        }
                        _ => {}
                    }
                    s.observe(idx, &ev);
                }
                Some(Err(e)) => {
                    tracing::debug!(resource = %ar.plural, error = %e, "gc watch error")
                }
            }
        }
    });
}

/// The dynamic API for a node.
fn api_for(s: &Shared, resource: usize, namespace: Option<&str>) -> Option<Api<DynamicObject>> {
    let g = s.graph();
    let r = g.resources.get(resource)?;
    Some(match (namespace, r.namespaced) {
        (Some(ns), true) => Api::namespaced_with(s.ctx.client.clone(), ns, &r.ar),
        _ => Api::all_with(s.ctx.client.clone(), &r.ar),
    })
}

/// How an owner reference resolves.
enum OwnerState {
    /// Exists and is not waiting for its dependents.
    Solid,
    /// Missing, or another object (uid) under that name.
    Dangling,
    /// Being deleted in the foreground.
    Waiting,
}

/// Looks the owner up live (upstream's `isDangling` asks the API server, not the graph).
async fn owner_state(
    s: &Shared,
    dependent_ns: Option<&str>,
    r: &OwnerReference,
) -> Result<OwnerState, ReconcileError> {
    let (idx, namespaced) = {
        let g = s.graph();
        match g.resource_for(&r.api_version, &r.kind) {
            Some(i) => (i, g.resources[i].namespaced),
            None => {
                // A kind discovery has not shown (yet): a custom resource whose CRD was just
                // established, or a typo. Upstream's REST mapping fails and the item is
                // retried with back-off until discovery knows the kind.
                return Err(ReconcileError::Other(format!(
                    "unable to get REST mapping for {}/{}",
                    r.api_version, r.kind
                )));
            }
        }
    };
    let ns = if namespaced { dependent_ns } else { None };
    let Some(api) = api_for(s, idx, ns) else {
        return Ok(OwnerState::Solid);
    };
    match api.get_opt(&r.name).await? {
        None => Ok(OwnerState::Dangling),
        Some(o) if o.metadata.uid.as_deref() != Some(r.uid.as_str()) => Ok(OwnerState::Dangling),
        Some(o) => {
            let waiting = o.metadata.deletion_timestamp.is_some()
                && o.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == FOREGROUND);
            Ok(if waiting {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            })
        }
    }
}

/// One work item: the node with `uid` (`attemptToDeleteItem` / `attemptToOrphan`).
async fn process(s: &Shared, uid: &str) -> SyncResult {
    let Some(node) = s.graph().nodes.get(uid).cloned() else {
        return Ok(None);
    };
    let Some(api) = api_for(s, node.resource, node.namespace.as_deref()) else {
        return Ok(None);
    };
    let Some(latest) = api.get_opt(&node.name).await? else {
        return Ok(None);
    };
    if latest.metadata.uid.as_deref() != Some(uid) {
        return Ok(None);
    }
    let finalizers = latest.metadata.finalizers.clone().unwrap_or_default();
    let deleting = latest.metadata.deletion_timestamp.is_some();
    if deleting && finalizers.iter().any(|f| f == ORPHAN) {
        orphan_dependents(s, uid).await?;
        remove_finalizer(&api, &latest, ORPHAN).await?;
        return Ok(None);
    }
    if deleting && finalizers.iter().any(|f| f == FOREGROUND) {
        return deleting_dependents(s, uid, &api, &latest).await;
    }
    if deleting {
        return Ok(None);
    }
    let owners = latest.metadata.owner_references.clone().unwrap_or_default();
    if owners.is_empty() {
        return Ok(None);
    }
    let mut solid = Vec::new();
    let mut dangling = Vec::new();
    let mut waiting = Vec::new();
    for r in &owners {
        match owner_state(s, node.namespace.as_deref(), r).await? {
            OwnerState::Solid => solid.push(r.clone()),
            OwnerState::Dangling => dangling.push(r.clone()),
            OwnerState::Waiting => waiting.push(r.clone()),
        }
    }
    if !solid.is_empty() {
        if dangling.is_empty() && waiting.is_empty() {
            return Ok(None);
        }
        // Keep the object; drop the references to owners that are gone or going.
        let gone: HashSet<&str> = dangling
            .iter()
            .chain(waiting.iter())
            .map(|r| r.uid.as_str())
            .collect();
        let keep: Vec<&OwnerReference> = owners
            .iter()
            .filter(|r| !gone.contains(r.uid.as_str()))
            .collect();
        let keep = if keep.is_empty() {
            serde_json::Value::Null
        } else {
            json!(keep)
        };
        let patch = json!({"metadata": {"ownerReferences": keep, "uid": uid}});
        match api
            .patch(&node.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(None);
    }
    let has_dependents = s.graph().dependents.get(uid).is_some_and(|d| !d.is_empty());
    let policy = if !waiting.is_empty() && has_dependents {
        PropagationPolicy::Foreground
    } else if finalizers.iter().any(|f| f == ORPHAN) {
        PropagationPolicy::Orphan
    } else if finalizers.iter().any(|f| f == FOREGROUND) {
        PropagationPolicy::Foreground
    } else {
        PropagationPolicy::Background
    };
    tracing::debug!(uid, name = %node.name, ?policy, "deleting object whose owners are gone");
    let dp = DeleteParams {
        propagation_policy: Some(policy),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&node.name, &dp).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `processDeletingDependentsItem`: removes `foregroundDeletion` once no dependent with
/// `blockOwnerDeletion` remains; otherwise deletes the blocking dependents.
async fn deleting_dependents(
    s: &Shared,
    uid: &str,
    api: &Api<DynamicObject>,
    owner: &DynamicObject,
) -> SyncResult {
    let blocking: Vec<(String, bool)> = {
        let g = s.graph();
        g.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| g.nodes.get(d).map(|n| (d, n)))
            .filter(|(_, n)| {
                n.owners
                    .iter()
                    .any(|o| o.uid == uid && o.block_owner_deletion == Some(true))
            })
            .map(|(d, n)| (d.clone(), n.deleting))
            .collect()
    };
    if blocking.is_empty() {
        remove_finalizer(api, owner, FOREGROUND).await?;
        return Ok(None);
    }
    // Delete every dependent (all are garbage once the owner goes in the foreground).
    let deps: Vec<String> = s
        .graph()
        .dependents
        .get(uid)
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    for d in deps {
        let node = s.graph().nodes.get(&d).cloned();
        let Some(node) = node else { continue };
        if node.deleting {
            continue;
        }
        let only_this_owner = node.owners.iter().all(|o| o.uid == uid);
        if !only_this_owner {
            s.queue.add(d.clone());
            continue;
        }
        let Some(dapi) = api_for(s, node.resource, node.namespace.as_deref()) else {
            continue;
        };
        let has_own_dependents = s.graph().dependents.get(&d).is_some_and(|x| !x.is_empty());
        let dp = DeleteParams {
            propagation_policy: Some(if has_own_dependents {
                PropagationPolicy::Foreground
            } else {
                PropagationPolicy::Background
            }),
            preconditions: Some(Preconditions {
                uid: Some(d.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match dapi.delete(&node.name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Look again in case an event is missed; dependents' deletions also wake the owner.
    Ok(Some(Duration::from_secs(5)))
}

/// `attemptToOrphan`: removes references to `uid` from its dependents.
async fn orphan_dependents(s: &Shared, uid: &str) -> Result<(), ReconcileError> {
    let deps: Vec<Node> = {
        let g = s.graph();
        g.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| g.nodes.get(d).cloned())
            .collect()
    };
    for d in deps {
        let Some(api) = api_for(s, d.resource, d.namespace.as_deref()) else {
            continue;
        };
        let Some(latest) = api.get_opt(&d.name).await? else {
            continue;
        };
        let owners = latest.metadata.owner_references.clone().unwrap_or_default();
        if !owners.iter().any(|o| o.uid == uid) {
            continue;
        }
        let keep: Vec<&OwnerReference> = owners.iter().filter(|o| o.uid != uid).collect();
        let keep = if keep.is_empty() {
            serde_json::Value::Null
        } else {
            json!(keep)
        };
        let patch = json!({"metadata": {
            "ownerReferences": keep,
            "uid": latest.metadata.uid,
            "resourceVersion": latest.metadata.resource_version,
        }});
        match api
            .patch(&d.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Removes `finalizer` from `obj` (merge patch with the resourceVersion as precondition).
async fn remove_finalizer(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    finalizer: &str,
) -> Result<(), ReconcileError> {
    let keep: Vec<&String> = obj
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .collect();
    let patch = json!({"metadata": {
        "finalizers": keep,
        "resourceVersion": obj.metadata.resource_version,
    }});
    let name = obj.metadata.name.clone().unwrap_or_default();
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(owners: Vec<OwnerReference>, deleting: bool) -> Node {
        Node {
            resource: 0,
            namespace: Some("ns".into()),
            name: "n".into(),
            owners,
            deleting,
            finalizers: Vec::new(),
        }
    }

    #[test]
    fn only_objects_with_owners_or_being_deleted_are_nodes() {
        let plain = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let owned = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
        let odd = "not-a-uuid";
        let upper = "0F8FAD5B-D9CB-469F-A165-70867728950E";
        assert_eq!(
            compact_uid(plain).map(|k| uid_string(&k)).as_deref(),
            Some(plain)
        );
        assert_eq!(compact_uid(upper), None);
        let owner_ref = OwnerReference {
            uid: plain.into(),
            ..OwnerReference::default()
        };
        let mut g = Graph::default();
        g.insert(plain.into(), node(Vec::new(), false));
        g.insert(owned.into(), node(vec![owner_ref.clone()], false));
        g.insert(odd.into(), node(Vec::new(), false));
        assert_eq!((g.plain.len(), g.nodes.len()), (1, 2));
        assert!(g.is_live(plain) && g.is_live(owned) && g.is_live(odd));
        assert!(!g.is_live("6ba7b810-9dad-11d1-80b4-00c04fd430c8"));
        // Being deleted: a node, and no longer a live owner.
        assert_eq!(g.remove(plain), Some(Vec::new()));
        g.insert(plain.into(), node(Vec::new(), true));
        assert!(g.plain.is_empty() && !g.is_live(plain));
        assert_eq!(g.remove(owned), Some(vec![owner_ref]));
        assert_eq!(g.remove(owned), None);
    }
}
