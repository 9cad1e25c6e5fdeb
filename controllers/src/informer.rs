//! Informers: a kube-rs reflector store kept by a watch, calling a handler with the old and
//! new object of every change (client-go's `ResourceEventHandler` shape: add = (None, new),
//! update = (old, new), delete = (old, None)).

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

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

/// Starts watching `api` into a store, calling `handler` for each change, until `shutdown`.
/// Await `store.wait_until_ready()` before trusting the store.
pub(crate) fn spawn<K>(api: Api<K>, handler: Handler<K>, shutdown: &CancellationToken) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, mut writer) = reflector::store::<K>();
    let reader = store.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        futures_util::pin_mut!(stream);
        loop {
            let ev = tokio::select! {
                () = shutdown.cancelled() => return,
                ev = stream.next() => ev,
            };
            let Some(ev) = ev else { return };
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::debug!(error = %e, "watch error; retrying");
                    continue;
                }
            };
            match &ev {
                Event::Apply(obj) | Event::InitApply(obj) => {
                    let old = reader.get(&ObjectRef::from_obj(obj));
                    writer.apply_watcher_event(&ev);
                    handler(old.as_deref(), Some(obj));
                }
                Event::Delete(obj) => {
                    writer.apply_watcher_event(&ev);
                    handler(Some(obj), None);
                }
                Event::Init | Event::InitDone => writer.apply_watcher_event(&ev),
            }
        }
    });
    store
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
