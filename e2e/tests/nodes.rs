//! Simulated nodes, seen through stock kubectl: `capstan server`'s in-process fleet registers
//! Ready Nodes with upstream's columns and renews their Leases; pods bound to them run,
//! complete, fail and are deleted as on a kubelet; a standalone `capstan nodes` process
//! registers its own node, whose Lease goes stale once the process is killed. The simulated
//! (worker) nodes are the ones without kubeadm's `node-role.kubernetes.io/control-plane` label;
//! the server's own control-plane Node (`--control-plane-pods`) is left out of the counts.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::cli::{cluster, ok, tail};
use e2e::{ServerProcess, capstan_bin};
use serde_json::Value;

/// Selects the simulated (worker) nodes: not the server's control-plane Node.
const WORKERS: &str = "!node-role.kubernetes.io/control-plane";

fn json(s: &ServerProcess, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(s, &all)).expect("kubectl printed JSON")
}

/// Polls `check` every 200 ms until it returns `Some`, or fails after `limit` with `what`.
fn eventually<T>(
    s: &ServerProcess,
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}\nserver log tail: {}",
            tail(&s.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ready_nodes(s: &ServerProcess) -> Vec<String> {
    let (ok, out, _) = s
        .kubectl(&["get", "nodes", "-l", WORKERS, "--no-headers"])
        .expect("kubectl runs");
    if !ok {
        return Vec::new();
    }
    out.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("Ready"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn renew_time(s: &ServerProcess, node: &str) -> Option<String> {
    let (ok, out, _) = s
        .kubectl(&[
            "get",
            "lease",
            "-n",
            "kube-node-lease",
            node,
            "-o",
            "jsonpath={.spec.renewTime}",
        ])
        .expect("kubectl runs");
    (ok && !out.is_empty()).then_some(out)
}

/// Whether dotted-quad `ip` lies in `cidr` (`a.b.c.d/n`).
fn in_cidr(ip: &str, cidr: &str) -> bool {
    let parse = |s: &str| -> Option<u32> {
        let o: Vec<u32> = s
            .split('.')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        (o.len() == 4).then(|| (o[0] << 24) | (o[1] << 16) | (o[2] << 8) | o[3])
    };
    let Some((base, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Some(ip), Some(base), Ok(bits)) = (parse(ip), parse(base), bits.parse::<u32>()) else {
        return false;
    };
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    ip & mask == base & mask
}

#[test]
fn the_in_process_fleet_registers_ready_nodes_and_runs_bound_pods() {
    let (_dir, s) = cluster();
    let nodes = eventually(&s, Duration::from_secs(60), "3 Ready nodes", || {
        let n = ready_nodes(&s);
        (n.len() == 3).then_some(n)
    });
    assert_eq!(
        nodes,
        ["capstan-node-0", "capstan-node-1", "capstan-node-2"]
    );

    // Upstream's columns, plain and wide.
    let plain = ok(&s, &["get", "nodes"]);
    let header: Vec<&str> = plain
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{plain}"
    );
    assert!(plain.contains("v1.33."), "{plain}");
    let wide = ok(&s, &["get", "nodes", "-o", "wide"]);
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "STATUS",
            "ROLES",
            "AGE",
            "VERSION",
            "INTERNAL-IP",
            "EXTERNAL-IP",
            "OS-IMAGE",
            "KERNEL-VERSION",
            "CONTAINER-RUNTIME"
        ],
        "{wide}"
    );
    assert!(wide.contains("Capstan simulated node"), "{wide}");

    // Labels, capacity, zones round-robin, distinct pod CIDRs, the simulated annotation.
    let list = json(&s, &["get", "nodes", "-l", WORKERS]);
    let items = list["items"].as_array().expect("items");
    let zones: Vec<&str> = items
        .iter()
        .map(|n| {
            n["metadata"]["labels"]["topology.kubernetes.io/zone"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(zones, ["zone-a", "zone-b", "zone-c"]);
    let mut cidrs = Vec::new();
    for n in items {
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], name);
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/os"], "linux");
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/arch"], "amd64");
        assert_eq!(n["metadata"]["annotations"]["capstan.io/simulated"], "true");
        assert_eq!(n["status"]["capacity"]["cpu"], "8");
        assert_eq!(n["status"]["allocatable"]["pods"], "110");
        assert_eq!(
            n["status"]["nodeInfo"]["kubeletVersion"]
                .as_str()
                .map(|v| v.starts_with("v1.33.")),
            Some(true)
        );
        let ready = n["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .expect("Ready condition");
        assert_eq!(ready["reason"], "KubeletReady");
        assert_eq!(ready["message"], "kubelet is posting ready status");
        cidrs.push(n["spec"]["podCIDR"].as_str().unwrap_or_default().to_owned());
    }
    cidrs.sort();
    cidrs.dedup();
    assert_eq!(cidrs.len(), 3, "distinct pod CIDRs: {cidrs:?}");

    // The Lease is owned by the Node and renewed (every 10 s).
    let lease = json(
        &s,
        &["get", "lease", "-n", "kube-node-lease", "capstan-node-0"],
    );
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(lease["spec"]["holderIdentity"], "capstan-node-0");
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    let first = renew_time(&s, "capstan-node-0").expect("lease renewTime");
    eventually(
        &s,
        Duration::from_secs(30),
        "the lease to be renewed",
        || renew_time(&s, "capstan-node-0").filter(|t| *t != first),
    );

    // A status someone else marked Unknown (as the node lifecycle controller does) is put
    // right at once by the live node.
    ok(
        &s,
        &[
            "patch",
            "node",
            "capstan-node-2",
            "--subresource=status",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"Kubelet stopped posting node status."}]}}"#,
        ],
    );
    eventually(
        &s,
        Duration::from_secs(30),
        "capstan-node-2 Ready again",
        || {
            let n = json(&s, &["get", "node", "capstan-node-2"]);
            let ready = n["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .cloned()
                .unwrap_or_default();
            (ready["status"] == "True" && ready["reason"] == "KubeletReady").then_some(())
        },
    );

    // Pods bound to the nodes move through the kubelet's lifecycle. Admission needs the
    // namespace's `default` ServiceAccount: made here if the controller has not yet.
    ok(&s, &["create", "namespace", "sim"]);
    let (_, _, err) = s
        .kubectl(&["create", "serviceaccount", "default", "-n", "sim"])
        .expect("kubectl runs");
    assert!(err.is_empty() || err.contains("already exists"), "{err}");
    let manifest = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: sim}
spec:
  nodeName: capstan-node-1
  containers: [{name: web, image: nginx, readinessProbe: {initialDelaySeconds: 1, httpGet: {port: 80}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: sleeper, namespace: sim}
spec:
  nodeName: capstan-node-0
  restartPolicy: Never
  initContainers: [{name: init, image: busybox, command: [sleep, "1"]}]
  containers: [{name: main, image: busybox, command: [sleep, "2"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: failer, namespace: sim}
spec:
  nodeName: capstan-node-2
  restartPolicy: Never
  containers: [{name: main, image: busybox, command: [sh, -c, "exit 3"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: timed, namespace: sim, annotations: {capstan.io/simulate-duration: 1s}}
spec:
  nodeName: capstan-node-2
  restartPolicy: OnFailure
  containers: [{name: main, image: registry.example/batch:v1}]
"#;
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(created, "{err}");
    ok(
        &s,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/web",
            "-n",
            "sim",
            "--timeout=60s",
        ],
    );
    let wide = ok(&s, &["get", "pod", "web", "-n", "sim", "-o", "wide"]);
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = wide
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &header[..7],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"],
        "{wide}"
    );
    assert_eq!(
        (row[1], row[2], row[6]),
        ("1/1", "Running", "capstan-node-1"),
        "{wide}"
    );
    let node1 = json(&s, &["get", "node", "capstan-node-1"]);
    let cidr = node1["spec"]["podCIDR"].as_str().unwrap_or_default();
    assert!(in_cidr(row[5], cidr), "pod IP {} outside {cidr}", row[5]);
    let web = json(&s, &["get", "pod", "web", "-n", "sim"]);
    let status = &web["status"];
    assert_eq!(status["hostIP"], node1["status"]["addresses"][0]["address"]);
    assert_eq!(status["podIPs"][0]["ip"], row[5]);
    let cs = &status["containerStatuses"][0];
    assert_eq!(
        (cs["ready"].as_bool(), cs["started"].as_bool()),
        (Some(true), Some(true))
    );
    assert!(cs["state"]["running"]["startedAt"].is_string(), "{cs}");
    assert!(
        cs["containerID"]
            .as_str()
            .is_some_and(|id| id.starts_with("capstan://")),
        "{cs}"
    );
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter(|c| c["status"] == "True")
                .filter_map(|c| c["type"].as_str())
                .collect()
        })
        .unwrap_or_default();
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ] {
        assert!(
            types.contains(&t),
            "{t} not True in {}",
            status["conditions"]
        );
    }

    // The kubelet's events show in `kubectl describe`.
    eventually(&s, Duration::from_secs(30), "the Started event", || {
        let d = ok(&s, &["describe", "pod", "web", "-n", "sim"]);
        (d.contains("Started container web") && d.contains("Created container: web")).then_some(())
    });

    // `sleep 2` with restartPolicy Never succeeds (after its init container completed).
    eventually(&s, Duration::from_secs(60), "sleeper to succeed", || {
        let p = json(&s, &["get", "pod", "sleeper", "-n", "sim"]);
        (p["status"]["phase"] == "Succeeded").then_some(())
    });
    let sleeper = json(&s, &["get", "pod", "sleeper", "-n", "sim"]);
    assert_eq!(
        sleeper["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(
        sleeper["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    let ready = sleeper["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .expect("Ready condition")
        .clone();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("PodCompleted"))
    );
    assert!(ready.get("message").is_none_or(Value::is_null), "{ready}");
    let listed = ok(&s, &["get", "pod", "sleeper", "-n", "sim", "--no-headers"]);
    assert!(listed.contains("Completed"), "{listed}");

    // `exit 3` fails the pod with exit code 3.
    eventually(&s, Duration::from_secs(60), "failer to fail", || {
        let p = json(&s, &["get", "pod", "failer", "-n", "sim"]);
        (p["status"]["phase"] == "Failed").then_some(())
    });
    let failer = json(&s, &["get", "pod", "failer", "-n", "sim"]);
    let term = &failer["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (term["exitCode"].as_i64(), term["reason"].as_str()),
        (Some(3), Some("Error")),
        "{term}"
    );

    // The simulate-duration annotation makes any container finish, successfully.
    eventually(&s, Duration::from_secs(60), "timed to succeed", || {
        let p = json(&s, &["get", "pod", "timed", "-n", "sim"]);
        (p["status"]["phase"] == "Succeeded").then_some(())
    });

    // Deletion honours the (capped) grace period, then the node removes the pod.
    let started = Instant::now();
    ok(&s, &["delete", "pod", "web", "-n", "sim", "--timeout=60s"]);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "delete took {:?}",
        started.elapsed()
    );
    let (found, _, err) = s
        .kubectl(&["get", "pod", "web", "-n", "sim"])
        .expect("kubectl runs");
    assert!(!found && err.contains("NotFound"), "{err}");

    // With the scheduler: `kubectl run` lands on one of the nodes and becomes Ready there.
    ok(&s, &["run", "nginx", "--image=nginx", "-n", "sim"]);
    ok(
        &s,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/nginx",
            "-n",
            "sim",
            "--timeout=60s",
        ],
    );
    let wide = ok(
        &s,
        &[
            "get",
            "pod",
            "nginx",
            "-n",
            "sim",
            "-o",
            "wide",
            "--no-headers",
        ],
    );
    let row: Vec<&str> = wide.split_whitespace().collect();
    assert!(row[6].starts_with("capstan-node-"), "{wide}");
    let node = json(&s, &["get", "node", row[6]]);
    let cidr = node["spec"]["podCIDR"].as_str().unwrap_or_default();
    assert!(in_cidr(row[5], cidr), "pod IP {} outside {cidr}", row[5]);
}

/// A `capstan nodes` child process, killed on drop.
struct Fleet(Child);

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_standalone_fleet_registers_its_node_and_its_lease_goes_stale_when_killed() {
    let (dir, s) = cluster();
    eventually(&s, Duration::from_secs(60), "3 Ready nodes", || {
        (ready_nodes(&s).len() == 3).then_some(())
    });
    let log = std::fs::File::create(dir.path().join("fleet.log")).expect("log file");
    let child = Command::new(capstan_bin())
        .args([
            "nodes",
            "--count",
            "1",
            "--name-prefix",
            "extra-",
            "--kubeconfig",
        ])
        .arg(&s.kubeconfig)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("capstan nodes starts");
    let mut fleet = Fleet(child);
    eventually(&s, Duration::from_secs(60), "node extra-0 Ready", || {
        ready_nodes(&s)
            .contains(&"extra-0".to_owned())
            .then_some(())
    });
    // Its pod CIDR does not collide with the in-process nodes'.
    let list = json(&s, &["get", "nodes", "-l", WORKERS]);
    let mut cidrs: Vec<&str> = list["items"]
        .as_array()
        .map(|i| {
            i.iter()
                .filter_map(|n| n["spec"]["podCIDR"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(cidrs.len(), 4);
    cidrs.sort_unstable();
    cidrs.dedup();
    assert_eq!(cidrs.len(), 4, "pod CIDRs collide: {list}");

    let first = eventually(&s, Duration::from_secs(30), "extra-0's lease", || {
        renew_time(&s, "extra-0")
    });
    let renewed = eventually(
        &s,
        Duration::from_secs(30),
        "extra-0's lease to be renewed",
        || renew_time(&s, "extra-0").filter(|t| *t != first),
    );

    // Killed, it stops renewing: two renewal periods later the renewTime has not moved,
    // while the in-process nodes' leases still move.
    let _ = fleet.0.kill();
    let _ = fleet.0.wait();
    let stale = renew_time(&s, "extra-0").expect("lease still there");
    assert!(stale >= renewed);
    let other = renew_time(&s, "capstan-node-0").expect("in-process lease");
    std::thread::sleep(Duration::from_secs(22));
    assert_eq!(
        renew_time(&s, "extra-0").as_deref(),
        Some(stale.as_str()),
        "a killed fleet's lease moved"
    );
    assert_ne!(
        renew_time(&s, "capstan-node-0"),
        Some(other),
        "in-process leases stopped too"
    );

    // Restarted, the fleet takes its node back (same pod CIDR) and renews again.
    let cidr = |s: &ServerProcess| {
        ok(
            s,
            &["get", "node", "extra-0", "-o", "jsonpath={.spec.podCIDR}"],
        )
    };
    let before = cidr(&s);
    let log = std::fs::File::create(dir.path().join("fleet2.log")).expect("log file");
    let child = Command::new(capstan_bin())
        .args([
            "nodes",
            "--count",
            "1",
            "--name-prefix",
            "extra-",
            "--kubeconfig",
        ])
        .arg(&s.kubeconfig)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("capstan nodes starts again");
    let _fleet = Fleet(child);
    eventually(
        &s,
        Duration::from_secs(30),
        "extra-0's lease renewed after the restart",
        || renew_time(&s, "extra-0").filter(|t| *t != stale),
    );
    assert_eq!(cidr(&s), before);
    assert!(ready_nodes(&s).contains(&"extra-0".to_owned()));
    drop(fleet);
}
