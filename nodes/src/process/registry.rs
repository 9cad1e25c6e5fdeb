//! What runs on a process node, as the kubelet API needs it: per pod and container, the
//! log file of every instance (so `previous` finds the one before), and the running
//! instance's sandbox (its init process, the user and environment `exec` enters with),
//! its stdin and its output for `attach`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc, watch};

/// How a process is entered or started: user, groups, environment, working directory.
#[derive(Debug, Clone, Default)]
pub(crate) struct Identity {
    /// User ID.
    pub(crate) uid: u32,
    /// Primary group ID.
    pub(crate) gid: u32,
    /// Supplemental groups.
    pub(crate) groups: Vec<u32>,
    /// Environment (already expanded).
    pub(crate) env: Vec<(String, String)>,
    /// Working directory inside the container.
    pub(crate) workdir: String,
}

/// One running container instance.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    /// The container ID reported in the pod status.
    pub(crate) id: String,
    /// PID (host namespace) of the container's first process, once known.
    pub(crate) init_pid: Arc<Mutex<Option<u32>>>,
    /// Becomes true when the instance has exited and its output is all in the log.
    pub(crate) done: watch::Receiver<bool>,
    /// The container's stdin (when the spec asks for one); `None` in the channel closes it.
    pub(crate) stdin: Option<mpsc::Sender<Option<Bytes>>>,
    /// Its output as it is produced: (1 stdout | 2 stderr, bytes).
    pub(crate) output: broadcast::Sender<(u8, Bytes)>,
    /// Who `exec` runs as, and with what environment.
    pub(crate) identity: Identity,
    /// The master of the terminal the command runs on (`tty: true`), for attach's window
    /// sizes.
    pub(crate) terminal: Option<Arc<std::fs::File>>,
}

/// One container of a pod.
#[derive(Debug, Default)]
pub(crate) struct Container {
    /// Log file of each instance, oldest first; the last is the current one.
    pub(crate) logs: Vec<PathBuf>,
    /// The running instance, if any.
    pub(crate) running: Option<Instance>,
}

/// One pod.
#[derive(Debug, Default)]
pub(crate) struct PodEntry {
    /// Its uid.
    pub(crate) uid: String,
    /// Its containers by name.
    pub(crate) containers: HashMap<String, Container>,
}

/// Every pod on the node by (namespace, name).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pods: Mutex<HashMap<(String, String), PodEntry>>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), PodEntry>> {
        self.pods.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the entry of pod `namespace/name` with `uid`, creating it (and replacing
    /// one of another uid).
    pub(crate) fn update<R>(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        f: impl FnOnce(&mut PodEntry) -> R,
    ) -> R {
        let mut pods = self.lock();
        let entry = pods
            .entry((namespace.to_owned(), name.to_owned()))
            .or_default();
        if entry.uid != uid {
            *entry = PodEntry {
                uid: uid.to_owned(),
                containers: HashMap::new(),
            };
        }
        f(entry)
    }

    /// Forgets pod `namespace/name` if it still has `uid`.
    pub(crate) fn remove(&self, namespace: &str, name: &str, uid: &str) {
        let mut pods = self.lock();
        let key = (namespace.to_owned(), name.to_owned());
        if pods.get(&key).is_some_and(|p| p.uid == uid) {
            pods.remove(&key);
        }
    }

    /// The log files and running instance of a container, if the pod is known here.
    pub(crate) fn container(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
    ) -> Option<(Vec<PathBuf>, Option<Instance>)> {
        let pods = self.lock();
        let pod = pods.get(&(namespace.to_owned(), name.to_owned()))?;
        let c = pod.containers.get(container)?;
        Some((c.logs.clone(), c.running.clone()))
    }

    /// Whether pod `namespace/name` is known here.
    pub(crate) fn has_pod(&self, namespace: &str, name: &str) -> bool {
        self.lock()
            .contains_key(&(namespace.to_owned(), name.to_owned()))
    }

    /// (namespace, name, uid) of every pod.
    pub(crate) fn pods(&self) -> Vec<(String, String, String)> {
        self.lock()
            .iter()
            .map(|((ns, n), p)| (ns.clone(), n.clone(), p.uid.clone()))
            .collect()
    }

    /// (namespace, pod, container, init PID) of every running container whose PID is known.
    pub(crate) fn running_pids(&self) -> Vec<(String, String, String, u32)> {
        let pods = self.lock();
        let mut out = Vec::new();
        for ((ns, name), p) in pods.iter() {
            for (c, entry) in &p.containers {
                let pid = entry
                    .running
                    .as_ref()
                    .and_then(|i| *i.init_pid.lock().unwrap_or_else(PoisonError::into_inner));
                if let Some(pid) = pid {
                    out.push((ns.clone(), name.clone(), c.clone(), pid));
                }
            }
        }
        out
    }
}
