//! The pod status a simulated kubelet reports: conditions as `pkg/kubelet/status`'s
//! `generate.go` builds them (PodReadyToStartContainers, Initialized, ContainersReady, Ready
//! with upstream's reasons and messages, readiness gates), container statuses with their
//! states, IDs and image IDs, addresses, and the QoS class when the pod has none. Ephemeral
//! containers (`kubectl debug`) are never run: each is reported terminated with `StartError`
//! and a message saying so, so `kubectl debug -it` stops at once (it falls back to the logs,
//! which say why there are none) instead of waiting forever for a container to start.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::{Ctr, Exit, Kind, Sim, State, backoff};
use crate::node::{hex_id, time};

impl Sim {
    /// A condition, keeping its transition time while its status is unchanged.
    fn condition(
        &mut self,
        kind: &'static str,
        status: &'static str,
        reason: Option<&str>,
        message: Option<String>,
        now: Timestamp,
    ) -> Value {
        let since = match self.conditions.get(kind) {
            Some((s, t)) if *s == status && !t.is_null() => t.clone(),
            _ => time(now),
        };
        self.conditions.insert(kind, (status, since.clone()));
        let mut c = json!({
            "type": kind,
            "status": status,
            "lastProbeTime": null,
            "lastTransitionTime": since,
        });
        // Explicit nulls clear what an earlier status said (the patch merges by type).
        c["reason"] = reason.map_or(Value::Null, |r| json!(r));
        c["message"] = message.map_or(Value::Null, |m| json!(m));
        c
    }

    /// The pod status to report at `now`.
    pub(super) fn status(&mut self, pod: &Pod, host_ip: Ipv4Addr, now: Timestamp) -> Value {
        let succeeded = self.phase == "Succeeded";
        let sandbox = !(self.terminal() || self.killed);
        let mut conditions = vec![self.condition(
            "PodReadyToStartContainers",
            if sandbox { "True" } else { "False" },
            None,
            None,
            now,
        )];
        // Initialized (generate.go's GeneratePodInitializedCondition).
        let any_regular_started = self.containers.iter().any(|c| {
            c.kind == Kind::Regular && !matches!(c.state, State::Waiting { .. } if c.last.is_none())
        });
        let incomplete: Vec<&str> = self
            .containers
            .iter()
            .filter(|c| match c.kind {
                Kind::Init => !matches!(&c.state, State::Terminated(e) if e.code == 0),
                Kind::Sidecar => !c.started(now) && !matches!(c.state, State::Terminated(_)),
                Kind::Regular => false,
            })
            .map(|c| c.name.as_str())
            .collect();
        let has_init = self.containers.iter().any(|c| c.kind != Kind::Regular);
        let initialized = if !has_init {
            self.condition("Initialized", "True", None, None, now)
        } else if succeeded {
            self.condition("Initialized", "True", Some("PodCompleted"), None, now)
        } else if any_regular_started || incomplete.is_empty() {
            self.condition("Initialized", "True", None, None, now)
        } else {
            let message = format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            );
            self.condition(
                "Initialized",
                "False",
                Some("ContainersNotInitialized"),
                Some(message),
                now,
            )
        };
        conditions.push(initialized);
        // ContainersReady and Ready (GenerateContainersReadyCondition, GeneratePodReadyCondition).
        let unready: Vec<String> = self
            .containers
            .iter()
            .filter(|c| match c.kind {
                Kind::Regular => !c.ready(now),
                Kind::Sidecar => !c.ready(now) && !succeeded,
                Kind::Init => false,
            })
            .map(|c| c.name.clone())
            .collect();
        let (status, reason, message): (&'static str, Option<&str>, Option<String>) = if succeeded {
            ("False", Some("PodCompleted"), None)
        } else if !unready.is_empty() {
            (
                "False",
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
            )
        } else {
            ("True", None, None)
        };
        let (ready_status, ready_reason, ready_message) = if status == "True" {
            match readiness_gates_unmet(pod) {
                Some(m) => ("False", Some("ReadinessGatesNotReady"), Some(m)),
                None => ("True", None, None),
            }
        } else {
            (status, reason, message.clone())
        };
        conditions.push(self.condition("Ready", ready_status, ready_reason, ready_message, now));
        conditions.push(self.condition("ContainersReady", status, reason, message, now));
        let scheduled = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled"));
        if !scheduled {
            conditions.push(self.condition("PodScheduled", "True", None, None, now));
        }

        let (actuated, resized) = self.actuate(pod);
        if resized {
            conditions.push(self.condition("PodResizeInProgress", "True", None, None, now));
        }
        let statuses = |kind: fn(Kind) -> bool| -> Vec<Value> {
            self.containers
                .iter()
                .filter(|c| kind(c.kind))
                .map(|c| {
                    let mut s = container_status(c, now);
                    if let Some(r) = actuated.get(&c.name) {
                        s["resources"] = r.clone();
                    }
                    s
                })
                .collect()
        };
        let mut status = json!({
            "phase": self.phase,
            "conditions": conditions,
            "hostIP": host_ip.to_string(),
            "hostIPs": [{"ip": host_ip.to_string()}],
            "startTime": time(self.start_time),
            "containerStatuses": statuses(|k| k == Kind::Regular),
        });
        if has_init {
            status["initContainerStatuses"] = json!(statuses(|k| k != Kind::Regular));
        }
        let ephemeral: Vec<Value> = pod
            .spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_ref())
            .into_iter()
            .flatten()
            .map(|e| ephemeral_status(&e.name, e.image.as_deref().unwrap_or("")))
            .collect();
        if !ephemeral.is_empty() {
            status["ephemeralContainerStatuses"] = json!(ephemeral);
        }
        if let Some(ip) = self.pod_ip {
            status["podIP"] = json!(ip.to_string());
            status["podIPs"] = json!([{"ip": ip.to_string()}]);
        }
        if pod
            .status
            .as_ref()
            .and_then(|s| s.qos_class.as_ref())
            .is_none()
        {
            status["qosClass"] = json!(qos_class(pod));
        }
        status
    }
}

/// The status of an ephemeral container: it never starts here (no timestamps, so the report
/// stays the same until something else changes).
fn ephemeral_status(name: &str, image: &str) -> Value {
    json!({
        "name": name,
        "image": image,
        "imageID": "",
        "ready": false,
        "started": false,
        "restartCount": 0,
        "state": {"terminated": {
            "exitCode": 128,
            "reason": "StartError",
            "message": format!(
                "ephemeral container {name} was not started: Capstan's nodes do not run ephemeral containers, so there is nothing to attach to"
            ),
        }},
        "lastState": {},
    })
}

fn container_status(c: &Ctr, now: Timestamp) -> Value {
    let terminated = |e: &Exit| {
        let mut t = json!({
            "exitCode": e.code,
            "reason": e.reason,
            "startedAt": time(e.started),
            "finishedAt": time(e.finished),
            "containerID": e.id,
        });
        if let Some(m) = e.message.as_ref().filter(|m| !m.is_empty()) {
            t["message"] = json!(m);
        }
        json!({"terminated": t})
    };
    let (state, id) = match &c.state {
        State::Waiting { reason, .. } => {
            let mut w = json!({"reason": reason});
            if *reason == "CrashLoopBackOff" {
                let delay = backoff(c.restarts - 1);
                w["message"] = json!(format!(
                    "back-off {}s restarting failed container={}",
                    delay.as_secs(),
                    c.name
                ));
            }
            (json!({"waiting": w}), c.last.as_ref().map(|e| e.id.clone()))
        }
        State::Running { since, id } => (
            json!({"running": {"startedAt": time(*since)}}),
            Some(id.clone()),
        ),
        State::Terminated(e) => (terminated(e), Some(e.id.clone())),
    };
    let mut s = json!({
        "name": c.name,
        "image": c.image,
        "imageID": image_id(&c.image),
        "ready": c.ready(now),
        "started": c.started(now),
        "restartCount": c.restarts,
        "state": state,
        "lastState": c.last.as_ref().map_or(json!({}), terminated),
    });
    if let Some(id) = id {
        s["containerID"] = json!(id);
    }
    s
}

impl Sim {
    /// The in-place resize of a kubelet that actuates at once: each running container's
    /// resources as this sync reports them (the size it ran with when the sync began), and
    /// whether a resize was actuated now — the spec (written through `pods/resize`) asks
    /// for other resources than a container has. Upstream then reports `PodResizeInProgress`
    /// (True, no reason) with the old resources, and the next sync, finding allocated equal to
    /// actual, the new resources without the condition.
    fn actuate(&mut self, pod: &Pod) -> (HashMap<String, Value>, bool) {
        let mut reported = HashMap::new();
        let mut resized = false;
        for c in &self.containers {
            if !matches!(c.state, State::Running { .. }) {
                continue;
            }
            let desired = actuated_resources(pod, &c.name);
            let had = self
                .actuated
                .entry(c.name.clone())
                .or_insert_with(|| desired.clone());
            if *had != desired {
                resized = true;
                reported.insert(c.name.clone(), std::mem::replace(had, desired));
            } else {
                reported.insert(c.name.clone(), desired);
            }
        }
        self.resizing = resized;
        if !resized {
            // A later resize starts a new transition.
            self.conditions.remove("PodResizeInProgress");
        }
        (reported, resized)
    }
}

/// Deletes a `PodResizeInProgress` condition the API still holds once no resize is in
/// progress (the kubelet's status patch removes it from the list). Added after the report's
/// digest, so the directive alone never makes the node write again.
pub(super) fn clear_finished_resize(sim: &Sim, pod: &Pod, status: &mut Value) {
    let held = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodResizeInProgress"));
    if held
        && !sim.resizing
        && let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut)
    {
        list.push(json!({"type": "PodResizeInProgress", "$patch": "delete"}));
    }
}

/// The resources a running container runs with (`convertContainerStatusResources` with
/// InPlacePodVerticalScaling on): this node actuates a resize at once, so what the pod's spec
/// (written through `pods/resize`) asks of cpu, memory and storage is what the container has,
/// and a finished resize leaves neither `PodResizePending` nor `PodResizeInProgress` behind.
/// An API server reads the presence of `resources` as the node's support for resize.
fn actuated_resources(pod: &Pod, name: &str) -> Value {
    let spec = pod.spec.as_ref();
    let container = spec.and_then(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .find(|c| c.name == name)
    });
    let res = container.and_then(|c| c.resources.as_ref());
    let mut out = json!({});
    for (key, list) in [
        ("limits", res.and_then(|r| r.limits.as_ref())),
        ("requests", res.and_then(|r| r.requests.as_ref())),
    ] {
        let Some(list) = list else { continue };
        let kept: serde_json::Map<String, Value> = list
            .iter()
            .filter(|(k, _)| {
                matches!(
                    k.as_str(),
                    "cpu" | "memory" | "ephemeral-storage" | "storage"
                )
            })
            .map(|(k, v)| (k.clone(), json!(v.0)))
            .collect();
        out[key] = Value::Object(kept);
    }
    out
}

/// A stable digest-style image ID for `image`.
fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    let full = if repo.contains('/') {
        if repo
            .split('/')
            .next()
            .is_some_and(|h| h.contains('.') || h.contains(':'))
        {
            repo.to_owned()
        } else {
            format!("docker.io/{repo}")
        }
    } else {
        format!("docker.io/library/{repo}")
    };
    format!("{full}@sha256:{}", hex_id(image, "image", 64))
}

/// Upstream's message for the first readiness gate whose condition is not True.
fn readiness_gates_unmet(pod: &Pod) -> Option<String> {
    let gates = pod.spec.as_ref()?.readiness_gates.as_ref()?;
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    for g in gates {
        let found = conditions.and_then(|cs| cs.iter().find(|c| c.type_ == g.condition_type));
        match found {
            None => {
                return Some(format!(
                    "corresponding condition of pod readiness gate \"{}\" does not exist.",
                    g.condition_type
                ));
            }
            Some(c) if c.status != "True" => {
                return Some(format!(
                    "the status of pod readiness gate \"{}\" is not \"True\", but {}",
                    g.condition_type, c.status
                ));
            }
            Some(_) => {}
        }
    }
    None
}

/// `v1.PodQOSClass` from requests and limits (for pods created without one).
fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return "BestEffort";
    };
    let all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let mut any = false;
    let mut guaranteed = true;
    for c in all {
        let res = c.resources.clone().unwrap_or_default();
        let requests = res.requests.unwrap_or_default();
        let limits = res.limits.unwrap_or_default();
        if !requests.is_empty() || !limits.is_empty() {
            any = true;
        }
        for r in ["cpu", "memory"] {
            match (limits.get(r), requests.get(r)) {
                (Some(l), Some(q)) if l.0 == q.0 => {}
                (Some(_), None) => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}
