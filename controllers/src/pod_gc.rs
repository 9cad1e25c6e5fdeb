//! The pod garbage collector (`podgc`): deletes terminated pods beyond
//! `--terminated-pod-gc-threshold` (oldest first), pods bound to nodes that no longer exist
//! (after a quarantine, marked Failed with a DisruptionTarget condition first), and
//! terminating pods that were never scheduled or sit on an out-of-service node. Upstream
//! `pkg/controller/podgc`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{Context, LoopFuture, informer};

/// Upstream's `gcCheckPeriod`.
const CHECK_PERIOD: Duration = Duration::from_secs(20);
/// Upstream's quarantine before a pod's missing node counts as gone.
const QUARANTINE: Duration = Duration::from_secs(40);
/// Taint marking a node out of service.
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Whether the pod finished.
fn terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The collector's state.
struct Collector {
    /// The controller's context.
    ctx: Context,
    /// Pods.
    pods: Store<Pod>,
    /// Nodes.
    nodes: Store<Node>,
    /// Names of missing nodes and when they were first missed.
    missing_since: HashMap<String, Instant>,
}

impl Collector {
    /// Force-deletes (grace 0) or deletes a pod; failures are logged and retried next pass.
    async fn delete(&self, pod: &Pod, force: bool) {
        let (Some(ns), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return;
        };
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), ns);
        let dp = if force {
            DeleteParams::default().grace_period(0)
        } else {
            DeleteParams::default()
        };
        tracing::info!(namespace = ns, pod = name, force, "podgc: deleting pod");
        match api.delete(name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => tracing::warn!(pod = name, error = %e, "podgc: delete failed"),
        }
    }

    /// Marks an orphaned pod Failed with a DisruptionTarget condition (upstream does so before
    /// deleting, so controllers see why it went).
    async fn mark_orphaned(&self, pod: &Pod) {
        let (Some(ns), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return;
        };
        if terminated(pod) {
            return;
        }
        let patch = json!({"status": {
            "phase": "Failed",
            "conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists",
                "lastTransitionTime": Time(Timestamp::now()),
            }],
        }});
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), ns);
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::debug!(pod = name, error = %e, "podgc: marking pod failed");
        }
    }

    /// One pass.
    async fn pass(&mut self, threshold: usize) {
        let pods = self.pods.state();
        let nodes: HashSet<String> = self
            .nodes
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        // Terminated pods over the threshold, oldest first.
        if threshold > 0 {
            let mut done: Vec<&Pod> = pods
                .iter()
                .map(AsRef::as_ref)
                .filter(|p| terminated(p) && p.metadata.deletion_timestamp.is_none())
                .collect();
            if done.len() > threshold {
                done.sort_by(|a, b| {
                    a.metadata
                        .creation_timestamp
                        .cmp(&b.metadata.creation_timestamp)
                });
                let extra = done.len() - threshold;
                for p in done.into_iter().take(extra) {
                    self.delete(p, true).await;
                }
            }
        }
        // Pods on nodes that are gone (after the quarantine).
        let now = Instant::now();
        let mut still_missing = HashSet::new();
        for p in &pods {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                // Never scheduled and being deleted: nothing else will finish it.
                if p.metadata.deletion_timestamp.is_some() {
                    self.delete(p, true).await;
                }
                continue;
            };
            if nodes.contains(&node) {
                if p.metadata.deletion_timestamp.is_some()
                    && informer::get(&self.nodes, &node).is_some_and(|n| {
                        n.spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .is_some_and(|ts| ts.iter().any(|t| t.key == OUT_OF_SERVICE))
                    })
                {
                    self.delete(p, true).await;
                }
                continue;
            }
            still_missing.insert(node.clone());
            let since = *self.missing_since.entry(node.clone()).or_insert(now);
            if now.duration_since(since) < QUARANTINE {
                continue;
            }
            // Confirm with a live read: the cache may lag a node's registration.
            let api: Api<Node> = Api::all(self.ctx.client.clone());
            match api.get_opt(&node).await {
                Ok(None) => {
                    self.mark_orphaned(p).await;
                    self.delete(p, true).await;
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::debug!(node = %node, error = %e, "podgc: node lookup failed"),
            }
        }
        self.missing_since.retain(|n, _| still_missing.contains(n));
    }
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let pods = ctx
        .informers
        .watch::<Pod>(Box::new(|_, _| {}), &shutdown)
        .await;
    let nodes = ctx
        .informers
        .watch::<Node>(Box::new(|_, _| {}), &shutdown)
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async { pods.wait_until_ready().await?; nodes.wait_until_ready().await } => r?,
    }
    let threshold = ctx.options.terminated_pod_gc_threshold;
    let mut gc = Collector {
        ctx,
        pods,
        nodes,
        missing_since: HashMap::new(),
    };
    loop {
        gc.pass(threshold).await;
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(CHECK_PERIOD) => {}
        }
    }
}
