//! The pod printer (`printPod`): READY, STATUS and RESTARTS as kubectl users know them.

use jiff::Timestamp;
use serde_json::json;

use super::{AGE, Env, J, NAME, Printer, Row, cells, col, condition, desc, since, timestamp, wide};

/// Pods: `Name Ready Status Restarts Age`; wide adds `IP Node Nominated Node Readiness Gates`.
pub(super) const PODS: Printer = Printer::new(
    &[
        NAME,
        col(
            "Ready",
            "string",
            "The aggregate readiness state of this pod for accepting traffic.",
        ),
        col(
            "Status",
            "string",
            "The aggregate status of the containers in this pod.",
        ),
        col(
            "Restarts",
            "string",
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        ),
        AGE,
        wide("IP", "string", desc::POD_STATUS_POD_IP),
        wide("Node", "string", desc::POD_SPEC_NODE_NAME),
        wide("Nominated Node", "string", desc::POD_STATUS_NOMINATED),
        wide("Readiness Gates", "string", desc::POD_SPEC_READINESS_GATES),
    ],
    row,
);

/// `node.NodeUnreachablePodReason`: the reason the node lifecycle controller gives pods of an
/// unreachable node.
const NODE_LOST: &str = "NodeLost";

/// Keeps the later of `latest` and the `lastState.terminated.finishedAt` of `status`
/// (Go's `lastRestartDate.Before(&terminatedDate)`).
fn note_restart(latest: &mut Option<Timestamp>, status: J<'_>) {
    let terminated = status.path(&["lastState", "terminated"]);
    if !terminated.is_set() {
        return;
    }
    if let Some(finished) = timestamp(terminated.get("finishedAt"))
        && latest.is_none_or(|l| l < finished)
    {
        *latest = Some(finished);
    }
}

/// `Signal:N` / `ExitCode:N` for a terminated state without a reason.
fn exit_text(terminated: J<'_>) -> String {
    let signal = terminated.get("signal").int();
    if signal != 0 {
        format!("Signal:{signal}")
    } else {
        format!("ExitCode:{}", terminated.get("exitCode").int())
    }
}

fn row(env: &Env<'_>, pod: J<'_>) -> Row {
    let spec = pod.get("spec");
    let status = pod.get("status");
    let phase = status.get("phase").str();

    let mut reason = phase.to_owned();
    if !status.get("reason").str().is_empty() {
        reason = status.get("reason").str().to_owned();
    }
    // A pod held back by scheduling gates says so.
    for c in status.get("conditions").items() {
        if c.get("type").str() == "PodScheduled" && c.get("reason").str() == "SchedulingGated" {
            reason = "SchedulingGated".to_owned();
        }
    }

    let init_specs: Vec<J<'_>> = spec.get("initContainers").items().collect();
    let init_count = init_specs.len();
    // A restartable ("sidecar") init container: restartPolicy Always.
    let restartable = |name: &str| {
        init_specs
            .iter()
            .find(|c| c.get("name").str() == name)
            .is_some_and(|c| c.get("restartPolicy").str() == "Always")
    };
    let sidecars = init_specs
        .iter()
        .filter(|c| c.get("restartPolicy").str() == "Always")
        .count();
    let total = spec.get("containers").len() + sidecars as i64;

    let mut ready = 0i64;
    let mut restarts = 0i64;
    let mut sidecar_restarts = 0i64;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_sidecar_restart: Option<Timestamp> = None;

    let mut initializing = false;
    for (i, c) in status.get("initContainerStatuses").items().enumerate() {
        restarts += c.get("restartCount").int();
        note_restart(&mut last_restart, c);
        let is_sidecar = restartable(c.get("name").str());
        if is_sidecar {
            sidecar_restarts += c.get("restartCount").int();
            note_restart(&mut last_sidecar_restart, c);
        }
        let terminated = c.path(&["state", "terminated"]);
        let waiting = c.path(&["state", "waiting"]);
        if terminated.is_set() && terminated.get("exitCode").int() == 0 {
            continue;
        }
        if is_sidecar && c.get("started").opt_bool() == Some(true) {
            if c.get("ready").bool() {
                ready += 1;
            }
            continue;
        }
        if terminated.is_set() {
            // Initialization failed.
            let why = terminated.get("reason").str();
            reason = if why.is_empty() {
                format!("Init:{}", exit_text(terminated))
            } else {
                format!("Init:{why}")
            };
        } else if waiting.is_set()
            && !waiting.get("reason").str().is_empty()
            && waiting.get("reason").str() != "PodInitializing"
        {
            reason = format!("Init:{}", waiting.get("reason").str());
        } else {
            reason = format!("Init:{i}/{init_count}");
        }
        initializing = true;
        break;
    }

    let initialized = condition(status.get("conditions"), "Initialized")
        .is_some_and(|c| c.get("status").str() == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        let statuses: Vec<J<'_>> = status.get("containerStatuses").items().collect();
        for c in statuses.iter().rev() {
            restarts += c.get("restartCount").int();
            note_restart(&mut last_restart, *c);
            let waiting = c.path(&["state", "waiting"]);
            let terminated = c.path(&["state", "terminated"]);
            if waiting.is_set() && !waiting.get("reason").str().is_empty() {
                reason = waiting.get("reason").str().to_owned();
            } else if terminated.is_set() && !terminated.get("reason").str().is_empty() {
                reason = terminated.get("reason").str().to_owned();
            } else if terminated.is_set() {
                reason = exit_text(terminated);
            } else if c.get("ready").bool() && c.path(&["state", "running"]).is_set() {
                has_running = true;
                ready += 1;
            }
        }
        // Back to Running if a container still runs.
        if reason == "Completed" && has_running {
            let pod_ready = status
                .get("conditions")
                .items()
                .any(|c| c.get("type").str() == "Ready" && c.get("status").str() == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_owned();
        }
    }

    let deleting = super::deleting(pod);
    if deleting && status.get("reason").str() == NODE_LOST {
        reason = "Unknown".to_owned();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".to_owned();
    }

    let restarts_text = match last_restart {
        Some(t) if restarts != 0 => {
            let ago = super::human_duration(super::nanos_between(t, env.now));
            format!("{restarts} ({ago} ago)")
        }
        _ => restarts.to_string(),
    };

    // status.podIP is authoritative over podIPs (upstream's v1 → internal conversion).
    let mut ip = status.get("podIP").str();
    if ip.is_empty() {
        ip = status
            .get("podIPs")
            .items()
            .next()
            .map_or("", |p| p.get("ip").str());
    }
    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_owned()
        } else {
            s.to_owned()
        }
    };
    let gates: Vec<&str> = spec
        .get("readinessGates")
        .items()
        .map(|g| g.get("conditionType").str())
        .collect();
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let satisfied = gates
            .iter()
            .filter(|t| {
                condition(status.get("conditions"), t)
                    .is_some_and(|c| c.get("status").str() == "True")
            })
            .count();
        format!("{satisfied}/{}", gates.len())
    };

    let mut row = Row::new(cells![
        super::name(pod),
        format!("{ready}/{total}"),
        reason,
        restarts_text,
        since(env, pod.path(&["metadata", "creationTimestamp"])),
        or_none(ip),
        or_none(spec.get("nodeName").str()),
        or_none(status.get("nominatedNodeName").str()),
        readiness_gates,
    ]);
    match phase {
        "Succeeded" => row.conditions.push(json!({
            "type": "Completed",
            "status": "True",
            "reason": "Succeeded",
            "message": "The pod has completed successfully.",
        })),
        "Failed" => row.conditions.push(json!({
            "type": "Completed",
            "status": "True",
            "reason": "Failed",
            "message": "The pod failed.",
        })),
        _ => {}
    }
    row
}
