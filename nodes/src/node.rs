//! One simulated node: its identity and addresses, the Node object it registers (as the
//! kubelet's `registerWithAPIServer` and its status setters in `pkg/kubelet/nodestatus`), its
//! heartbeats (the Lease in `kube-node-lease` renewed every quarter of
//! `leaseDurationSeconds`, as `pkg/kubelet/nodelease`; the Node status re-posted every
//! `nodeStatusReportFrequency`, as the kubelet does when nothing changed).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Options;
use crate::api::{Call, FleetApi, Lane, MERGE, STRATEGIC, status_code};
use crate::cidr::{Cidr, PodIps};

/// Annotation marking a Node (and so its pods) as simulated; the apiserver answers
/// `kubectl logs`/`exec` on them with a clear error.
pub const SIMULATED_ANNOTATION: &str = "capstan.io/simulated";
/// Namespace of node Leases.
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet version simulated nodes report (the apiserver's minor).
pub(crate) const KUBELET_VERSION: &str = "v1.33.0+capstan";

/// A simulated node's fixed facts and its pod address pool.
#[derive(Debug)]
pub(crate) struct SimNode {
    /// Node name (`<prefix><index>`).
    pub(crate) name: String,
    /// Its `topology.kubernetes.io/zone`.
    pub(crate) zone: String,
    /// `spec.podCIDR`.
    pub(crate) pod_cidr: Cidr,
    /// Its InternalIP (and pods' hostIP).
    pub(crate) ip: Ipv4Addr,
    /// Pod IPs in use.
    pub(crate) pod_ips: Mutex<PodIps>,
    /// The Node's conditions as the fleet's node watch last saw them.
    observed: Mutex<Option<Value>>,
    /// Woken when the stored conditions disagree with what this node reports.
    changed: tokio::sync::Notify,
    /// Set when this run created the Node (so its Lease is created without a read first).
    fresh: AtomicBool,
    /// The process runtime of this node, when it runs pods as processes.
    pub(crate) process: std::sync::OnceLock<std::sync::Arc<crate::process::ProcessNode>>,
}

impl SimNode {
    /// A node with these addresses.
    pub(crate) fn new(name: String, zone: String, pod_cidr: Cidr, ip: Ipv4Addr) -> Self {
        SimNode {
            name,
            zone,
            pod_cidr,
            ip,
            pod_ips: Mutex::new(PodIps::new(pod_cidr)),
            observed: Mutex::new(None),
            changed: tokio::sync::Notify::new(),
            fresh: AtomicBool::new(false),
            process: std::sync::OnceLock::new(),
        }
    }

    fn labels(&self) -> Value {
        json!({
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "topology.kubernetes.io/zone": self.zone,
        })
    }

    fn annotations(&self) -> Value {
        let simulated = if self.process.get().is_some() {
            "false"
        } else {
            "true"
        };
        json!({
            SIMULATED_ANNOTATION: simulated,
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        })
    }

    /// The Node this node registers.
    fn object(&self, opts: &Options, now: Timestamp) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": self.labels(),
                "annotations": self.annotations(),
            },
            "spec": {
                "podCIDR": self.pod_cidr.to_string(),
                "podCIDRs": [self.pod_cidr.to_string()],
            },
            "status": self.status(opts, now, None),
        })
    }

    /// The Node status as the kubelet's setters build it; `previous` (the stored Node's
    /// conditions) keeps `lastTransitionTime` where a condition's status did not change.
    fn status(&self, opts: &Options, now: Timestamp, previous: Option<&Value>) -> Value {
        let resources = json!({
            "cpu": opts.cpu,
            "memory": opts.memory,
            "pods": opts.pods.to_string(),
            "ephemeral-storage": opts.ephemeral_storage,
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
        });
        let heartbeat = time(now);
        let condition = |kind: &str, status: &str, reason: &str, message: &str| {
            let since = previous
                .and_then(|p| p.as_array())
                .and_then(|cs| {
                    cs.iter().find(|c| {
                        c.get("type").and_then(Value::as_str) == Some(kind)
                            && c.get("status").and_then(Value::as_str) == Some(status)
                    })
                })
                .and_then(|c| c.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| heartbeat.clone());
            json!({
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": since,
            })
        };
        json!({
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": self.ip.to_string()},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.process.get().map_or(10250, |p| p.kubelet_port)}},
            "nodeInfo": {
                "machineID": hex_id(&self.name, "machine", 32),
                "systemUUID": uuid_like(&self.name),
                "bootID": uuid_like(&format!("{}-{}", self.name, process_start())),
                "kernelVersion": "6.1.0-capstan-amd64",
                "osImage": if self.process.get().is_some() { "Capstan process node (host root, images not pulled)" } else { "Capstan simulated node" },
                "containerRuntimeVersion": if self.process.get().is_some() { concat!("capstan-process://", env!("CARGO_PKG_VERSION")) } else { concat!("capstan://", env!("CARGO_PKG_VERSION")) },
                "kubeletVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        })
    }

    /// Registers the Node (or, if it exists, brings its labels, annotations and status up
    /// to date) and returns its uid.
    pub(crate) async fn register(&self, api: &FleetApi, opts: &Options) -> kube::Result<String> {
        let name = Some(self.name.as_str());
        let now = Timestamp::now();
        let created: kube::Result<Value> = api
            .send(name, &Call::post("/api/v1/nodes", &self.object(opts, now)))
            .await;
        let node = match created {
            Ok(node) => {
                self.fresh.store(true, Ordering::Relaxed);
                node
            }
            Err(e) if status_code(&e) == Some(409) => {
                let existing: Value = api.send(name, &Call::get(self.path())).await?;
                let covers = |field: &str, want: &Value| {
                    want.as_object().is_some_and(|w| {
                        w.iter()
                            .all(|(k, v)| existing["metadata"][field].get(k) == Some(v))
                    })
                };
                if !covers("labels", &self.labels()) || !covers("annotations", &self.annotations())
                {
                    let patch = json!({"metadata": {
                        "labels": self.labels(),
                        "annotations": self.annotations(),
                    }});
                    let _: Value = api
                        .send(name, &Call::patch(self.path(), &patch, MERGE))
                        .await?;
                }
                existing
            }
            Err(e) => return Err(e),
        };
        let ready = node
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Ready")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                        && c.get("lastHeartbeatTime") == Some(&time(now))
                })
            });
        if !ready {
            self.post_status(api, Lane::Work, opts, node.pointer("/status/conditions"))
                .await?;
        }
        Ok(node
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned())
    }

    /// `PATCH nodes/<name>/status` with the full status (a heartbeat).
    async fn post_status(
        &self,
        api: &FleetApi,
        lane: Lane,
        opts: &Options,
        previous: Option<&Value>,
    ) -> kube::Result<Value> {
        let patch = json!({"status": self.status(opts, Timestamp::now(), previous)});
        api.send_in(
            lane,
            Some(&self.name),
            &Call::patch(format!("{}/status", self.path()), &patch, STRATEGIC),
        )
        .await
    }

    fn path(&self) -> String {
        format!("/api/v1/nodes/{}", self.name)
    }

    fn lease_path(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{}",
            self.name
        )
    }

    /// Renews the node's Lease and re-posts its status until `shutdown`, as the kubelet's
    /// lease controller and status loop: the Lease every `leaseDurationSeconds / 4` (retried
    /// from 200 ms doubling to 7 s after a failure), the status every report period.
    pub(crate) async fn heartbeat(
        &self,
        api: FleetApi,
        opts: &Options,
        uid: String,
        shutdown: CancellationToken,
    ) {
        let renew_every = Duration::from_secs(u64::from(opts.node_lease_duration_seconds) / 4)
            .max(Duration::from_millis(250));
        let report_every = opts.node_status_report_frequency;
        let mut lease: Option<Value> = None;
        let mut backoff = Duration::from_millis(200);
        // Spread the fleet's status reports over the period.
        let mut next_report =
            tokio::time::Instant::now() + report_every.mul_f64(jitter(&self.name, 0));
        let mut next_renew = tokio::time::Instant::now();
        let mut rounds = 0u64;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep_until(next_renew.min(next_report)) => {}
                () = self.changed.notified() => {
                    // Someone else changed our conditions (e.g. the node lifecycle
                    // controller's Unknown): report at once, as the kubelet does.
                    next_report = tokio::time::Instant::now();
                }
            }
            let now = tokio::time::Instant::now();
            if now >= next_renew {
                match self.renew_lease(&api, opts, &uid, lease.take()).await {
                    Ok(mut l) => {
                        // Kept for the next update; managedFields are rebuilt by the server.
                        if let Some(meta) = l.get_mut("metadata").and_then(Value::as_object_mut) {
                            meta.remove("managedFields");
                        }
                        lease = Some(l);
                        backoff = Duration::from_millis(200);
                        rounds += 1;
                        // The kubelet's renew interval has no jitter; a little keeps 5,000
                        // nodes started together from renewing in lockstep forever.
                        next_renew =
                            now + renew_every.mul_f64(0.96 + 0.08 * jitter(&self.name, rounds));
                    }
                    Err(e) => {
                        tracing::warn!(node = %self.name, error = %e, "failed to update lease, will retry");
                        next_renew = now + backoff;
                        backoff = (backoff * 2).min(Duration::from_secs(7));
                    }
                }
            }
            if now >= next_report {
                match self.current_conditions(&api).await {
                    Ok(previous) => {
                        if let Err(e) = self
                            .post_status(&api, Lane::Heartbeat, opts, previous.as_ref())
                            .await
                        {
                            tracing::warn!(node = %self.name, error = %e, "error updating node status, will retry");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(node = %self.name, error = %e, "error getting node, will retry");
                    }
                }
                next_report = now + report_every;
            }
        }
    }

    /// Records the conditions the node watch saw; wakes the heartbeat if they are not the
    /// ones this node reports.
    pub(crate) fn observe(&self, conditions: Option<Value>) {
        let differs = !reports_as_ours(conditions.as_ref());
        *self
            .observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = conditions;
        if differs {
            self.changed.notify_one();
        }
    }

    async fn current_conditions(&self, api: &FleetApi) -> kube::Result<Option<Value>> {
        let seen = self
            .observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if seen.is_some() {
            return Ok(seen);
        }
        let node: Value = api
            .send_in(Lane::Heartbeat, Some(&self.name), &Call::get(self.path()))
            .await?;
        Ok(node.pointer("/status/conditions").cloned())
    }

    /// One renewal: update the Lease we hold (or read it, or create it), as
    /// `nodelease.controller`'s `ensureLease` + `retryUpdateLease`.
    async fn renew_lease(
        &self,
        api: &FleetApi,
        opts: &Options,
        node_uid: &str,
        held: Option<Value>,
    ) -> kube::Result<Value> {
        let name = Some(self.name.as_str());
        let create_path =
            format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases");
        if held.is_none() && self.fresh.swap(false, Ordering::Relaxed) {
            // A Node we just created has no Lease yet: create it without reading first.
            let fresh = self.lease_object(opts, node_uid);
            match api
                .send_in(
                    Lane::Heartbeat,
                    name,
                    &Call::post(create_path.clone(), &fresh),
                )
                .await
            {
                Err(e) if status_code(&e) == Some(409) => {}
                other => return other,
            }
        }
        let mut lease = match held {
            Some(l) => l,
            None => match api
                .send_in::<Value>(Lane::Heartbeat, name, &Call::get(self.lease_path()))
                .await
            {
                Ok(l) => l,
                Err(e) if status_code(&e) == Some(404) => {
                    let fresh = self.lease_object(opts, node_uid);
                    return api
                        .send_in(Lane::Heartbeat, name, &Call::post(create_path, &fresh))
                        .await;
                }
                Err(e) => return Err(e),
            },
        };
        let spec = self.lease_spec(opts);
        if let (Some(obj), Some(spec)) = (lease.as_object_mut(), spec.as_object()) {
            let current = obj.entry("spec").or_insert_with(|| json!({}));
            if let Some(current) = current.as_object_mut() {
                for (k, v) in spec {
                    current.insert(k.clone(), v.clone());
                }
            }
        }
        if !node_uid.is_empty()
            && lease.pointer("/metadata/ownerReferences").is_none()
            && let Some(meta) = lease.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert("ownerReferences".into(), owner(&self.name, node_uid));
        }
        match api
            .send_in(Lane::Heartbeat, name, &Call::put(self.lease_path(), &lease))
            .await
        {
            Err(e) if status_code(&e) == Some(409) => {
                // Someone else wrote it: read it again next time.
                Err(e)
            }
            other => other,
        }
    }

    fn lease_spec(&self, opts: &Options) -> Value {
        json!({
            "holderIdentity": self.name,
            "leaseDurationSeconds": opts.node_lease_duration_seconds,
            "renewTime": serde_json::to_value(MicroTime(Timestamp::now())).unwrap_or(Value::Null),
        })
    }

    fn lease_object(&self, opts: &Options, node_uid: &str) -> Value {
        let mut meta = json!({"name": self.name, "namespace": LEASE_NAMESPACE});
        if !node_uid.is_empty() {
            meta["ownerReferences"] = owner(&self.name, node_uid);
        }
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": self.lease_spec(opts),
        })
    }
}

/// Whether `conditions` say what a healthy simulated node reports.
fn reports_as_ours(conditions: Option<&Value>) -> bool {
    let Some(list) = conditions.and_then(Value::as_array) else {
        return false;
    };
    [
        ("MemoryPressure", "False"),
        ("DiskPressure", "False"),
        ("PIDPressure", "False"),
        ("Ready", "True"),
    ]
    .iter()
    .all(|(kind, status)| {
        list.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(*kind)
                && c.get("status").and_then(Value::as_str) == Some(*status)
        })
    })
}

fn owner(name: &str, uid: &str) -> Value {
    json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}])
}

/// A `metav1.Time` as JSON (RFC 3339, seconds).
pub(crate) fn time(t: Timestamp) -> Value {
    serde_json::to_value(Time(t)).unwrap_or(Value::Null)
}

/// A stable pseudo-random fraction in [0, 1) from `key` and `round`.
pub(crate) fn jitter(key: &str, round: u64) -> f64 {
    let mut h = DefaultHasher::new();
    (key, round).hash(&mut h);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// `len` hex digits derived from `key` and `salt`.
pub(crate) fn hex_id(key: &str, salt: &str, len: usize) -> String {
    let mut out = String::with_capacity(len + 16);
    let mut round = 0u64;
    while out.len() < len {
        let mut h = DefaultHasher::new();
        (key, salt, round).hash(&mut h);
        out.push_str(&format!("{:016x}", h.finish()));
        round += 1;
    }
    out.truncate(len);
    out
}

fn uuid_like(key: &str) -> String {
    let h = hex_id(key, "uuid", 32);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// When this process started (seconds), so a restarted fleet reports new boot IDs.
fn process_start() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
    })
}
