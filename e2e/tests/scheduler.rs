//! The scheduler end to end: `capstan server` with its in-process scheduler, no simulated
//! nodes and its own control-plane Node (`cp1`, tainted NoSchedule as kubeadm's, so it counts
//! in every "0/N nodes" message as upstream's does); Node objects are created with kubectl,
//! pods are placed as kube-scheduler would, unschedulable pods carry upstream's
//! FailedScheduling text and are retried when a node appears, and a high-priority pod
//! preempts lower-priority ones.

use std::time::{Duration, Instant};

use e2e::{ServerProcess, http_get};

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_raw(
        &dir.path().join("data"),
        &[
            "--nodes=0",
            "--disable-controller-manager",
            // No node lifecycle controller lifts TaintNodesByCondition's not-ready taint.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--control-plane-pods",
            "--name=cp1",
        ],
    )
    .expect("server");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !s
        .kubectl(&["get", "node", "cp1"])
        .is_ok_and(|(found, _, _)| found)
    {
        assert!(Instant::now() < deadline, "no control-plane node cp1");
        std::thread::sleep(Duration::from_millis(200));
    }
    (dir, s)
}

fn apply(s: &ServerProcess, yaml: &str) {
    let (ok, out, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(yaml))
        .expect("kubectl");
    assert!(ok, "apply failed: {out} {err}\n{yaml}");
}

/// Creates a node with `cpu` CPUs, labels and taints, then sets its status (capacity,
/// allocatable, Ready) through the status subresource as a kubelet would.
fn node(s: &ServerProcess, name: &str, cpu: &str, zone: &str, extra_labels: &str, taints: &str) {
    apply(
        s,
        &format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n    topology.kubernetes.io/zone: {zone}\n{extra_labels}spec:\n  taints: [{taints}]\n"
        ),
    );
    let status = format!(
        r#"{{"status":{{"capacity":{{"cpu":"{cpu}","memory":"16Gi","pods":"110"}},"allocatable":{{"cpu":"{cpu}","memory":"16Gi","pods":"110"}},"conditions":[{{"type":"Ready","status":"True","reason":"KubeletReady","message":"simulated"}}]}}}}"#
    );
    let (ok, out, err) = s
        .kubectl(&[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ])
        .expect("kubectl");
    assert!(ok, "status patch failed: {out} {err}");
}

fn pod(s: &ServerProcess, name: &str, labels: &str, cpu: &str, spec_extra: &str) {
    apply(
        s,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{{labels}}}\nspec:\n  terminationGracePeriodSeconds: 0\n{spec_extra}  containers:\n  - name: c\n    image: nginx\n    resources:\n      requests:\n        cpu: \"{cpu}\"\n"
        ),
    );
}

fn get(s: &ServerProcess, name: &str, path: &str) -> String {
    let (_, out, _) = s
        .kubectl(&["get", "pod", name, "-o", &format!("jsonpath={path}")])
        .expect("kubectl");
    out.trim().to_owned()
}

/// Waits (60 s) until the pod is bound and returns its node.
fn bound(s: &ServerProcess, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = get(s, name, "{.spec.nodeName}");
        if !n.is_empty() {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} not bound; status: {}\nlog: {}",
            get(s, name, "{.status}"),
            s.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (60 s) until the pod's PodScheduled condition is False with reason Unschedulable
/// and returns its message.
fn unschedulable(s: &ServerProcess, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reason = get(
            s,
            name,
            "{.status.conditions[?(@.type==\"PodScheduled\")].reason}",
        );
        if reason == "Unschedulable" {
            return get(
                s,
                name,
                "{.status.conditions[?(@.type==\"PodScheduled\")].message}",
            );
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} not marked unschedulable: {}",
            get(s, name, "{.status}")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn describe_shows(s: &ServerProcess, name: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, out, _) = s.kubectl(&["describe", "pod", name]).expect("kubectl");
        if out.contains(text) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "describe pod {name} never showed {text:?}:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

const GPU_TOLERATION: &str =
    "  tolerations:\n  - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}\n";

#[test]
fn pods_land_where_kubernetes_would_put_them() {
    let (_d, s) = server();
    node(&s, "n1", "4", "zone-a", "    disk: ssd\n", "");
    node(&s, "n2", "4", "zone-b", "", "");
    node(
        &s,
        "n3",
        "4",
        "zone-c",
        "",
        "{key: dedicated, value: gpu, effect: NoSchedule}",
    );

    // nodeSelector.
    pod(
        &s,
        "selector",
        "app: s",
        "100m",
        "  nodeSelector: {disk: ssd}\n",
    );
    assert_eq!(bound(&s, "selector"), "n1");

    // Required node affinity.
    pod(
        &s,
        "required",
        "app: r",
        "100m",
        "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions:\n          - {key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}\n",
    );
    assert_eq!(bound(&s, "required"), "n2");

    // Preferred node affinity, on the tainted node the pod tolerates.
    pod(
        &s,
        "preferred",
        "app: p",
        "100m",
        &format!(
            "{GPU_TOLERATION}  affinity:\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n      - weight: 100\n        preference:\n          matchExpressions:\n          - {{key: topology.kubernetes.io/zone, operator: In, values: [zone-c]}}\n"
        ),
    );
    assert_eq!(bound(&s, "preferred"), "n3");

    // The taint keeps an intolerant pod off the gpu node even when it asks for it.
    pod(
        &s,
        "intolerant",
        "app: i",
        "100m",
        "  nodeSelector: {topology.kubernetes.io/zone: zone-c}\n",
    );
    let msg = unschedulable(&s, "intolerant");
    assert_eq!(
        msg,
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    );

    // Topology spread across the 3 zones: one replica per zone.
    let spread = format!(
        "{GPU_TOLERATION}  topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: topology.kubernetes.io/zone\n    whenUnsatisfiable: DoNotSchedule\n    labelSelector: {{matchLabels: {{app: spread}}}}\n"
    );
    let mut zones = Vec::new();
    for i in 0..3 {
        let name = format!("spread-{i}");
        pod(&s, &name, "app: spread", "100m", &spread);
        zones.push(bound(&s, &name));
    }
    zones.sort();
    assert_eq!(zones, vec!["n1", "n2", "n3"]);

    // Required pod anti-affinity on hostname: three replicas on three nodes, a fourth waits.
    let anti = format!(
        "{GPU_TOLERATION}  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {{matchLabels: {{app: anti}}}}\n        topologyKey: kubernetes.io/hostname\n"
    );
    let mut hosts = Vec::new();
    for i in 0..3 {
        let name = format!("anti-{i}");
        pod(&s, &name, "app: anti", "100m", &anti);
        hosts.push(bound(&s, &name));
    }
    hosts.sort();
    assert_eq!(hosts, vec!["n1", "n2", "n3"]);
    pod(&s, "anti-3", "app: anti", "100m", &anti);
    let msg = unschedulable(&s, "anti-3");
    assert!(
        msg.starts_with("0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 3 node(s) didn't match pod anti-affinity rules."),
        "{msg}"
    );

    // Least-allocated scoring: a plain pod avoids the busiest node (n1 gets 2 CPUs taken).
    pod(&s, "hog", "app: hog", "3", "  nodeSelector: {disk: ssd}\n");
    assert_eq!(bound(&s, "hog"), "n1");
    pod(&s, "plain", "app: plain", "500m", "");
    assert_eq!(bound(&s, "plain"), "n2");

    // Leader election: the scheduler holds the kube-scheduler Lease.
    let (ok, holder, err) = s
        .kubectl(&[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-scheduler",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .expect("kubectl");
    assert!(ok && !holder.trim().is_empty(), "lease: {holder} {err}");
}

#[test]
fn a_pod_too_big_for_every_node_waits_and_schedules_when_a_big_node_joins() {
    let (_d, s) = server();
    for n in ["small-1", "small-2", "small-3"] {
        node(&s, n, "4", "zone-a", "", "");
    }
    pod(&s, "huge", "app: huge", "100", "");
    let expected = "0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 3 Insufficient cpu. preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod.";
    assert_eq!(unschedulable(&s, "huge"), expected);
    describe_shows(&s, "huge", "FailedScheduling");
    describe_shows(&s, "huge", expected);
    assert_eq!(get(&s, "huge", "{.status.phase}"), "Pending");

    // A node big enough arrives: the same scheduler places the pod, no restart.
    node(&s, "big", "128", "zone-b", "", "");
    assert_eq!(bound(&s, "huge"), "big");
    let cond = get(
        &s,
        "huge",
        "{.status.conditions[?(@.type==\"PodScheduled\")].status}",
    );
    assert_eq!(cond, "True");
    describe_shows(&s, "huge", "Successfully assigned default/huge to big");
}

#[test]
fn a_high_priority_pod_preempts_lower_priority_pods_on_a_full_node() {
    let (_d, s) = server();
    node(&s, "only", "2", "zone-a", "", "");
    apply(
        &s,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 100\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high-never}\nvalue: 1000\npreemptionPolicy: Never\n",
    );
    for name in ["low-1", "low-2"] {
        pod(&s, name, "tier: low", "1", "  priorityClassName: low\n");
        assert_eq!(bound(&s, name), "only");
    }
    assert_eq!(get(&s, "low-1", "{.spec.priority}"), "100");

    // preemptionPolicy: Never waits instead of evicting.
    pod(
        &s,
        "polite",
        "tier: high",
        "1",
        "  priorityClassName: high-never\n",
    );
    assert_eq!(
        unschedulable(&s, "polite"),
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }. preemption: not eligible due to preemptionPolicy=Never."
    );
    let (ok, _, err) = s
        .kubectl(&["delete", "pod", "polite", "--wait=false"])
        .expect("kubectl");
    assert!(ok, "{err}");

    pod(&s, "vip", "tier: high", "1", "  priorityClassName: high\n");
    assert_eq!(bound(&s, "vip"), "only");
    // Exactly one victim went; the other low pod still runs there.
    let (_, out, _) = s
        .kubectl(&[
            "get",
            "pods",
            "-l",
            "tier=low",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .expect("kubectl");
    let left: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(left.len(), 1, "low pods left: {out}");
    let (_, events, _) = s
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "reason=Preempted",
            "-o",
            "jsonpath={.items[*].note}{.items[*].message}",
        ])
        .expect("kubectl");
    assert!(events.contains("Preempted by pod"), "events: {events}");
}

/// Kills a spawned process when dropped (also when a test fails).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GETs `path` from a plain-HTTP endpoint on 127.0.0.1:`port` and returns the body.
#[test]
fn a_standalone_scheduler_serves_its_profiles_elects_a_leader_and_exports_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_raw(
        &dir.path().join("data"),
        &[
            "--nodes=0",
            "--disable-controller-manager",
            "--disable-scheduler",
            // No node lifecycle controller lifts TaintNodesByCondition's not-ready taint.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        ],
    )
    .expect("server");
    node(&s, "n1", "4", "zone-a", "", "");
    let port = e2e::free_port();
    let kubeconfig = s.kubeconfig.display().to_string();
    let metrics_addr = format!("--metrics-bind-address=127.0.0.1:{port}");
    let child = std::process::Command::new(e2e::capstan_bin())
        .args([
            "scheduler",
            "--kubeconfig",
            &kubeconfig,
            &metrics_addr,
            "--profiles=default-scheduler,second-scheduler",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn scheduler");
    let child = KillOnDrop(child);

    // One lease holder at a time; when it stops, the standby takes over (within the 15 s lease).
    let holder = |s: &ServerProcess| {
        s.kubectl(&[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-scheduler",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .map(|(_, o, _)| o.trim().to_owned())
        .unwrap_or_default()
    };
    // The first instance takes the lease before the standby starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while holder(&s).is_empty() {
        assert!(Instant::now() < deadline, "no scheduler took the lease");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A second instance waits for the lease and binds nothing.
    let standby = std::process::Command::new(e2e::capstan_bin())
        .args(["scheduler", "--kubeconfig", &kubeconfig])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn standby");
    let _standby = KillOnDrop(standby);

    pod(&s, "first", "app: a", "100m", "");
    pod(
        &s,
        "second",
        "app: b",
        "100m",
        "  schedulerName: second-scheduler\n",
    );
    pod(
        &s,
        "nobody",
        "app: c",
        "100m",
        "  schedulerName: no-such-scheduler\n",
    );
    assert_eq!(bound(&s, "first"), "n1");
    assert_eq!(bound(&s, "second"), "n1");

    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = http_get(port, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        if text.contains("scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"second-scheduler\"} 1") {
            break text;
        }
        assert!(Instant::now() < deadline, "metrics: {text}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(
        text.contains("scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("scheduler_pod_scheduling_duration_seconds"),
        "{text}"
    );
    assert!(
        text.contains("scheduler_pending_pods{queue=\"active\"}"),
        "{text}"
    );
    assert_eq!(http_get(port, "/healthz"), Some((200, "ok".to_owned())));

    // A pod for a scheduler nobody runs stays unscheduled and untouched.
    assert_eq!(get(&s, "nobody", "{.spec.nodeName}"), "");
    assert_eq!(get(&s, "nobody", "{.status.conditions}"), "");

    let first_holder = holder(&s);
    assert!(!first_holder.is_empty());
    drop(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while holder(&s) == first_holder {
        assert!(
            Instant::now() < deadline,
            "the standby never took the lease"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    pod(&s, "third", "app: d", "100m", "");
    assert_eq!(bound(&s, "third"), "n1");
}
