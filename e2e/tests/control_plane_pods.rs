//! The control plane as pods (`capstan server --control-plane-pods`), as kubeadm shows it:
//! a control-plane Node (role label, NoSchedule taint) and mirror pods in kube-system with
//! kubeadm's labels, Running and Ready while their components are healthy; a restart of the
//! server counts one restart of each. `/livez?verbose` and `/readyz?verbose` list upstream's
//! checks; `/readyz/<check>` and `?exclude=` work as upstream's.

use std::time::{Duration, Instant};

use e2e::ServerProcess;
use serde_json::Value;

fn json(server: &ServerProcess, args: &[&str]) -> Value {
    let (ok, out, err) = server.kubectl(args).expect("kubectl");
    assert!(ok, "kubectl {args:?}: {out} {err}\n{}", server.log());
    serde_json::from_str(&out).expect("JSON")
}

/// Waits until the four mirror pods are Running and Ready; returns them.
fn wait_pods(server: &ServerProcess) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = json(
            server,
            &[
                "get",
                "pods",
                "-n",
                "kube-system",
                "-l",
                "tier=control-plane",
                "-o",
                "json",
            ],
        );
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let ready = items
            .iter()
            .filter(|p| {
                p["status"]["phase"] == "Running"
                    && p["status"]["containerStatuses"][0]["ready"] == true
            })
            .count();
        if items.len() == 4 && ready == 4 {
            return items;
        }
        assert!(
            Instant::now() < deadline,
            "mirror pods not all Ready: {}\n{}",
            serde_json::to_string_pretty(&items).unwrap_or_default(),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn control_plane_components_show_up_as_mirror_pods_on_a_control_plane_node() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("server");
    let args = ["--nodes=0", "--control-plane-pods", "--name=cp1"];
    let mut server = ServerProcess::start_raw(&dir, &args).expect("start");
    let pods = wait_pods(&server);
    let mut components: Vec<String> = pods
        .iter()
        .map(|p| {
            p["metadata"]["labels"]["component"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    components.sort();
    assert_eq!(
        components,
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler"
        ]
    );
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        assert!(name.ends_with("-cp1"), "{name}");
        assert_eq!(p["spec"]["nodeName"], "cp1");
        assert!(p["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Node");
    }
    let (ok, table, err) = server
        .kubectl(&["get", "pods", "-n", "kube-system"])
        .expect("kubectl");
    assert!(
        ok && table.contains("kube-apiserver-cp1") && table.contains("Running"),
        "{table} {err}"
    );

    let node = json(&server, &["get", "node", "cp1", "-o", "json"]);
    assert!(
        node["metadata"]["labels"]
            .get("node-role.kubernetes.io/control-plane")
            .is_some()
    );
    assert_eq!(
        node["spec"]["taints"][0]["key"],
        "node-role.kubernetes.io/control-plane"
    );
    assert_eq!(node["spec"]["taints"][0]["effect"], "NoSchedule");
    let (ok, table, _) = server.kubectl(&["get", "nodes"]).expect("kubectl");
    assert!(
        ok && table.contains("control-plane") && table.contains("Ready"),
        "{table}"
    );

    // Health endpoints list upstream's checks.
    let raw = |path: &str| {
        let (ok, out, err) = server.kubectl(&["get", "--raw", path]).expect("kubectl");
        assert!(ok, "{path}: {err}");
        out
    };
    let ready = raw("/readyz?verbose");
    for check in [
        "[+]ping ok",
        "[+]etcd ok",
        "[+]etcd-readiness ok",
        "[+]informer-sync ok",
        "[+]poststarthook/rbac/bootstrap-roles ok",
        "[+]poststarthook/start-apiextensions-controllers ok",
        "[+]autoregister-completion ok",
        "[+]shutdown ok",
        "readyz check passed",
    ] {
        assert!(ready.contains(check), "{check} in {ready}");
    }
    let live = raw("/livez?verbose");
    assert!(
        live.contains("[+]etcd ok") && live.contains("livez check passed"),
        "{live}"
    );
    assert!(
        !live.contains("[+]shutdown") && !live.contains("[+]informer-sync ok"),
        "{live}"
    );
    assert_eq!(raw("/readyz/etcd"), "ok");
    assert!(raw("/readyz?verbose&exclude=etcd").contains("[+]etcd excluded: ok"));

    // A restart of the server: one restart of every component.
    server.kill9();
    let server = ServerProcess::start_raw(&dir, &args).expect("restart");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = wait_pods(&server);
        let counts: Vec<i64> = pods
            .iter()
            .map(|p| {
                p["status"]["containerStatuses"][0]["restartCount"]
                    .as_i64()
                    .unwrap_or(-1)
            })
            .collect();
        if counts.iter().all(|c| *c == 1) {
            break;
        }
        assert!(Instant::now() < deadline, "restart counts {counts:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
