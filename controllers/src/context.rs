//! What every controller loop gets: its API client, identity, event recorder and metrics, plus
//! the error type reconcilers return (kube-runtime requeues failures with backoff).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::metrics::Metrics;

/// Shared handles for one controller loop.
#[derive(Clone)]
pub struct Context {
    /// The client this controller talks to the API server with (its own service account's
    /// token, as kube-controller-manager's `--use-service-account-credentials`).
    pub client: kube::Client,
    /// The controller's name as `--controllers` spells it (e.g. `replicaset`).
    pub name: &'static str,
    /// Records events as upstream's component (e.g. `replicaset-controller`).
    pub recorder: Recorder,
    /// One recorder per (object, reason, message): identical events become a series (as
    /// client-go's correlator counts repeats), different messages stay separate events.
    recorders: Arc<Mutex<HashMap<String, Recorder>>>,
    /// Who reports the events.
    reporter: Reporter,
    /// client-go's `EventSourceObjectSpamFilter`: per object a bucket of 25 events refilled
    /// one per 5 minutes.
    spam: Arc<Mutex<HashMap<String, (f64, std::time::Instant)>>>,
    /// The controller manager's metrics registry handles.
    pub metrics: Arc<Metrics>,
    /// The controller manager's own client (`system:kube-controller-manager`), for watches and
    /// lists: upstream's shared informers use it, and the per-controller roles lack list/watch
    /// on what they only read through informers.
    pub root: kube::Client,
    /// The cluster CA bundle (PEM) the controller manager trusts, for `kube-root-ca.crt`.
    pub root_ca: Option<Arc<str>>,
    /// The controller manager's flags (tunables such as `--node-monitor-grace-period`).
    pub options: Arc<crate::Options>,
    /// The controller manager's shared informers (one watch per kind for all loops).
    pub(crate) informers: crate::informer::Informers,
}

impl Context {
    /// A context for controller `name` talking through `client`, reporting events as
    /// `component`.
    pub fn new(
        client: kube::Client,
        name: &'static str,
        component: &str,
        metrics: Arc<Metrics>,
    ) -> Self {
        let reporter = Reporter {
            controller: component.to_owned(),
            instance: hostname(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            recorders: Arc::default(),
            spam: Arc::default(),
            reporter,
            root: client.clone(),
            informers: crate::informer::Informers::new(
                client.clone(),
                tokio_util::sync::CancellationToken::new(),
            ),
            root_ca: None,
            options: Arc::new(crate::Options::default()),
            client,
            name,
            metrics,
        }
    }

    /// The same context with the controller manager's own client and CA bundle.
    pub fn with_root(mut self, root: kube::Client, root_ca: Option<Arc<str>>) -> Self {
        self.root = root;
        self.root_ca = root_ca;
        self
    }

    /// The same context with the controller manager's shared informers.
    pub(crate) fn with_informers(mut self, informers: crate::informer::Informers) -> Self {
        self.informers = informers;
        self
    }

    /// The same context with the controller manager's flags.
    pub fn with_options(mut self, options: Arc<crate::Options>) -> Self {
        self.options = options;
        self
    }

    /// Publishes an event about `regarding`; failures are logged, never fatal (as client-go's
    /// broadcaster).
    pub async fn event(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        let mut regarding = regarding.clone();
        regarding.resource_version = None;
        let key = format!(
            "{}/{}/{reason}/{}",
            regarding.uid.as_deref().unwrap_or_default(),
            regarding.name.as_deref().unwrap_or_default(),
            ev.note.as_deref().unwrap_or_default()
        );
        if !self.allow_event(&regarding) {
            return;
        }
        let recorder = {
            let mut map = self
                .recorders
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if map.len() > 10_000 {
                map.clear();
            }
            map.entry(key)
                .or_insert_with(|| Recorder::new(self.client.clone(), self.reporter.clone()))
                .clone()
        };
        // Published in the background, as client-go's broadcaster: a controller never waits
        // for its events.
        let name = self.name;
        let reason = reason.to_owned();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&ev, &regarding).await {
                tracing::debug!(controller = name, error = %e, reason, "event not recorded");
            }
        });
    }
}

impl Context {
    /// The spam filter: true while the object's bucket (burst 25, one more every 300 s) has
    /// a token.
    fn allow_event(&self, regarding: &ObjectReference) -> bool {
        const BURST: f64 = 25.0;
        const REFILL_SECS: f64 = 300.0;
        let key = format!(
            "{}/{}",
            regarding.uid.as_deref().unwrap_or_default(),
            regarding.name.as_deref().unwrap_or_default()
        );
        let mut map = self
            .spam
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() > 10_000 {
            map.retain(|_, (_, at)| at.elapsed().as_secs_f64() < REFILL_SECS * BURST);
        }
        let now = std::time::Instant::now();
        let (tokens, at) = map.entry(key).or_insert((BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() / REFILL_SECS).min(BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The host name, for Lease holder identities and events' reporting instance.
pub(crate) fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
}

/// Why a reconcile failed; the controller requeues the object with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The API server refused or failed a request.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A serialisation round trip failed.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Anything else, worded for the log.
    #[error("{0}")]
    Other(String),
}

/// An object reference for events about `obj`.
pub fn reference<K: kube::Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    let meta = obj.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}
