//! Informers: a kube-rs reflector store kept by a watch, calling a handler with the old and
//! new object of every change (client-go's `ResourceEventHandler` shape: add = (None, new),
//! update = (old, new), delete = (old, None)).
//!
//! [`Informers`] shares them as client-go's `SharedInformerFactory` does: one watch and one
//! store per kind for every controller of the controller manager, however many handlers are
//! registered (ten controllers look at pods; one watch feeds them all).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt;
use kube::Api;
use kube::Resource;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// An event handler: (old, new).
pub(crate) type Handler<K> = Box<dyn Fn(Option<&K>, Option<&K>) + Send + Sync>;

/// A kind the informers watch, with the form its watch events are decoded in: the kind
/// itself, or a leaner reading of it that converts into it (pods, without managed fields:
/// [`lean`]).
pub(crate) trait Watched:
    Resource + Clone + DeserializeOwned + serde::Serialize + Debug + Send + Sync + 'static
where
    Self::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// What a watch event's object is decoded as.
    type Wire: Resource<DynamicType = Self::DynamicType>
        + Into<Self>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
}

/// Kinds decoded as themselves.
macro_rules! watched_as_is {
    ($($ty:ty),* $(,)?) => {
        $(impl Watched for $ty { type Wire = $ty; })*
    };
}

watched_as_is!(
    k8s_openapi::api::apps::v1::ControllerRevision,
    k8s_openapi::api::apps::v1::DaemonSet,
    k8s_openapi::api::apps::v1::Deployment,
    k8s_openapi::api::apps::v1::ReplicaSet,
    k8s_openapi::api::apps::v1::StatefulSet,
    k8s_openapi::api::batch::v1::CronJob,
    k8s_openapi::api::batch::v1::Job,
    k8s_openapi::api::certificates::v1::CertificateSigningRequest,
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::core::v1::ConfigMap,
    k8s_openapi::api::core::v1::Endpoints,
    k8s_openapi::api::core::v1::Namespace,
    k8s_openapi::api::core::v1::Node,
    k8s_openapi::api::core::v1::PersistentVolume,
    k8s_openapi::api::core::v1::PersistentVolumeClaim,
    k8s_openapi::api::core::v1::ReplicationController,
    k8s_openapi::api::core::v1::ResourceQuota,
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::core::v1::ServiceAccount,
    k8s_openapi::api::discovery::v1::EndpointSlice,
    k8s_openapi::api::policy::v1::PodDisruptionBudget,
    k8s_openapi::api::rbac::v1::ClusterRole,
    k8s_openapi::api::storage::v1::StorageClass,
);

impl Watched for k8s_openapi::api::core::v1::Pod {
    type Wire = lean::LeanPod;
}

/// Starts watching `api` into a store of its own, calling `handler` for each change, until
/// `shutdown`. Await `store.wait_until_ready()` (one waiter) before trusting the store.
pub(crate) fn spawn<K>(
    api: Api<K::Wire>,
    handler: Handler<K>,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Watched,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    spawn_with(api, watcher::Config::default(), handler, shutdown)
}

/// As [`spawn`], watching only what `config` selects (a field or label selector): the store
/// then holds only those objects, not every object of the kind. With `api`'s client;
/// [`Informers::watch_selected`] is the form with the manager's own credentials.
pub(crate) fn spawn_with<K>(
    api: Api<K::Wire>,
    config: watcher::Config,
    handler: Handler<K>,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Watched,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let informer = Shared::start(api, config, shutdown.clone());
    informer.register(handler, shutdown);
    informer.store
}

/// The controller manager's shared informers: one cluster-wide watch per kind, started on the
/// first request for that kind and kept until the manager's `shutdown` (the end of its
/// leadership). Handlers come and go with the controller loop that registered them.
#[derive(Clone)]
pub(crate) struct Informers {
    /// The controller manager's own client (upstream's shared informers use it too).
    client: kube::Client,
    shutdown: CancellationToken,
    /// `TypeId` of `K` → `Arc<Shared<K>>`.
    kinds: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
}

/// One shared informer: its store and who listens.
struct Shared<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    dispatch: Arc<Mutex<Dispatch<K>>>,
    /// Becomes true at the end of the first list. (kube-rs's `Store::wait_until_ready` wakes
    /// only the last of several concurrent waiters, so shared stores signal readiness here.)
    ready: tokio::sync::watch::Receiver<bool>,
}

/// What the watch task and handler registration share (under one lock, so a new handler sees
/// every object exactly once before its first live event).
struct Dispatch<K> {
    /// Each handler with the token of the controller loop that registered it.
    handlers: Vec<(Handler<K>, CancellationToken)>,
    /// Objects of a list in progress: the reflector store shows them only once it ends.
    listing: Vec<Arc<K>>,
}

impl Informers {
    /// Shared informers on `client` that stop at `shutdown`.
    pub(crate) fn new(client: kube::Client, shutdown: CancellationToken) -> Self {
        Informers {
            client,
            shutdown,
            kinds: Arc::default(),
        }
    }

    /// The shared store of every `K` in the cluster, calling `handler` for each change until
    /// `until` is cancelled. A handler registered after the watch started first gets an add
    /// for each object already known. Returns once the store holds the first list (or
    /// `until` is cancelled).
    pub(crate) async fn watch<K>(&self, handler: Handler<K>, until: &CancellationToken) -> Store<K>
    where
        K: Watched,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let shared = {
            let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = kinds
                .entry(TypeId::of::<K>())
                .or_insert_with(|| Arc::new(self.start::<K>()) as Arc<dyn Any + Send + Sync>)
                .clone();
            entry.downcast::<Shared<K>>()
        };
        let Ok(shared) = shared else {
            // Unreachable: the map is keyed by the type it holds. Fall back to a private
            // informer rather than fail.
            return spawn(Api::<K::Wire>::all(self.client.clone()), handler, until);
        };
        shared.register(handler, until);
        let mut ready = shared.ready.clone();
        tokio::select! {
            () = until.cancelled() => {}
            _ = ready.wait_for(|r| *r) => {}
        }
        shared.store.clone()
    }

    /// A store of the `K`s `config` selects (a field or label selector), with the manager's
    /// own client as the shared informers: not shared (another selection is another
    /// watch), stopped at `until`. Calls `handler` for each change; returns once the store
    /// holds the first list (or `until` is cancelled).
    pub(crate) async fn watch_selected<K>(
        &self,
        config: watcher::Config,
        handler: Handler<K>,
        until: &CancellationToken,
    ) -> Store<K>
    where
        K: Watched,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let informer = Shared::start(
            Api::<K::Wire>::all(self.client.clone()),
            config,
            until.clone(),
        );
        informer.register(handler, until);
        let mut ready = informer.ready.clone();
        tokio::select! {
            () = until.cancelled() => {}
            _ = ready.wait_for(|r| *r) => {}
        }
        informer.store
    }

    /// Starts the watch of every `K`.
    fn start<K>(&self) -> Shared<K>
    where
        K: Watched,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        Shared::start(
            Api::<K::Wire>::all(self.client.clone()),
            watcher::Config::default(),
            self.shutdown.clone(),
        )
    }
}

impl<K> Shared<K>
where
    K: Watched,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// Starts watching what `config` selects of `api` until `shutdown`; handlers are
    /// registered afterwards.
    fn start(api: Api<K::Wire>, config: watcher::Config, shutdown: CancellationToken) -> Self {
        let (store, mut writer) = reflector::store::<K>();
        let dispatch = Arc::new(Mutex::new(Dispatch {
            handlers: Vec::new(),
            listing: Vec::new(),
        }));
        let (reader, d) = (store.clone(), dispatch.clone());
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let usage = lean::caches::cache(
            "controller-manager",
            K::plural(&K::DynamicType::default()).into_owned(),
        );
        tokio::spawn(async move {
            let stream = watcher::watcher(api, config).default_backoff();
            futures_util::pin_mut!(stream);
            // Objects and bytes of a list in progress (the store switches to it at its end).
            let mut listed = (0usize, 0usize);
            loop {
                let ev = tokio::select! {
                    () = shutdown.cancelled() => return,
                    ev = stream.next() => ev,
                };
                let Some(ev) = ev else { return };
                let ev: Event<K> = match ev {
                    Ok(Event::Apply(o)) => Event::Apply(lean_object(o)),
                    Ok(Event::InitApply(o)) => Event::InitApply(lean_object(o)),
                    Ok(Event::Delete(o)) => Event::Delete(lean_object(o)),
                    Ok(Event::Init) => Event::Init,
                    Ok(Event::InitDone) => Event::InitDone,
                    Err(e) => {
                        tracing::debug!(error = %e, "shared watch error; retrying");
                        continue;
                    }
                };
                let mut d = d.lock().unwrap_or_else(PoisonError::into_inner);
                d.handlers.retain(|(_, until)| !until.is_cancelled());
                match &ev {
                    Event::Apply(obj) | Event::InitApply(obj) => {
                        let old = reader.get(&ObjectRef::from_obj(obj));
                        writer.apply_watcher_event(&ev);
                        if matches!(ev, Event::InitApply(_)) {
                            listed.0 += 1;
                            listed.1 += lean::caches::json_size(obj);
                            d.listing.push(Arc::new(obj.clone()));
                        } else {
                            match &old {
                                Some(o) => usage.replace(
                                    lean::caches::json_size(o.as_ref()),
                                    lean::caches::json_size(obj),
                                ),
                                None => usage.add(lean::caches::json_size(obj)),
                            }
                        }
                        for (h, _) in &d.handlers {
                            h(old.as_deref(), Some(obj));
                        }
                    }
                    Event::Delete(obj) => {
                        if let Some(o) = reader.get(&ObjectRef::from_obj(obj)) {
                            usage.remove(lean::caches::json_size(o.as_ref()));
                        }
                        writer.apply_watcher_event(&ev);
                        for (h, _) in &d.handlers {
                            h(Some(obj), None);
                        }
                    }
                    Event::Init | Event::InitDone => {
                        writer.apply_watcher_event(&ev);
                        d.listing.clear();
                        if matches!(ev, Event::InitDone) {
                            usage.set(listed.0, listed.1);
                            ready_tx.send_replace(true);
                        }
                        listed = (0, 0);
                    }
                }
            }
        });
        Shared {
            store,
            dispatch,
            ready,
        }
    }

    /// Adds `handler` until `until` is cancelled, first giving it an add for every object
    /// already known (under the dispatch lock, so it sees each object once before its first
    /// live event).
    fn register(&self, handler: Handler<K>, until: &CancellationToken) {
        let mut d = self.dispatch.lock().unwrap_or_else(PoisonError::into_inner);
        for obj in self.store.state().iter().chain(d.listing.iter()) {
            handler(None, Some(obj.as_ref()));
        }
        d.handlers.push((handler, until.clone()));
    }
}

/// A watched object as the store keeps it: converted from its wire form, without
/// `metadata.managedFields` (no controller reads them; upstream's informers strip them too,
/// client-go's `TransformStripManagedFields`).
fn lean_object<K: Watched>(wire: K::Wire) -> K
where
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let mut obj: K = wire.into();
    obj.meta_mut().managed_fields = None;
    obj
}

/// A handler that queues the key ([`key`]) of each changed object.
pub(crate) fn enqueue_key<K: Resource>(queue: crate::queue::Queue) -> Handler<K> {
    Box::new(move |old: Option<&K>, new: Option<&K>| {
        if let Some(obj) = new.or(old) {
            queue.add(key(obj));
        }
    })
}

/// A handler that queues `namespace/name` of each changed object's controller when that
/// controller is of kind `kind` (what the workload controllers do with their pods' events).
pub(crate) fn enqueue_controller<K: Resource>(
    kind: &'static str,
    queue: crate::queue::Queue,
) -> Handler<K> {
    Box::new(move |old: Option<&K>, new: Option<&K>| {
        let Some(obj) = new.or(old) else { return };
        let meta = obj.meta();
        let owner = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == kind);
        if let (Some(o), Some(ns)) = (owner, meta.namespace.as_deref()) {
            queue.add(format!("{ns}/{}", o.name));
        }
    })
}

/// `namespace/name` (or `name`) of an object.
pub(crate) fn key<K: Resource>(obj: &K) -> String {
    let m = obj.meta();
    match &m.namespace {
        Some(ns) => format!("{ns}/{}", m.name.as_deref().unwrap_or_default()),
        None => m.name.clone().unwrap_or_default(),
    }
}

/// Splits a key into namespace and name.
pub(crate) fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// The store's object for `key` (namespaced `ns/name`).
pub(crate) fn get<K>(store: &Store<K>, key: &str) -> Option<Arc<K>>
where
    K: Resource + Clone,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (ns, name) = split_key(key);
    let mut r = ObjectRef::<K>::new(name);
    if let Some(ns) = ns {
        r = r.within(ns);
    }
    store.get(&r)
}
