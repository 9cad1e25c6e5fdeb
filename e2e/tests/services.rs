//! Services get endpoints, and namespaces get their defaults, from the controller manager
//! running inside `capstan server`: `kubectl expose deployment` → Endpoints and EndpointSlices
//! list the ready pod IPs and follow `kubectl scale`; every namespace gets a `default`
//! ServiceAccount (recreated when deleted) and the `kube-root-ca.crt` ConfigMap; ResourceQuota
//! status follows usage; aggregated ClusterRoles follow the roles they select.

use std::collections::BTreeSet;

use e2e::ServerProcess;
use e2e::cli::{cluster, json, ok, wait_for};
use serde_json::Value;

/// IPs of the running, ready pods labelled app=web.
fn ready_pod_ips(s: &ServerProcess) -> BTreeSet<String> {
    let pods = json(s, &["get", "pods", "-l", "app=web", "-o", "json"]);
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_owned))
        .collect()
}

/// Ready endpoint addresses across the service's EndpointSlices, checking their labels,
/// owner and conditions on the way.
fn slice_ready_ips(s: &ServerProcess) -> BTreeSet<String> {
    let slices = json(
        s,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "json",
        ],
    );
    let mut ips = BTreeSet::new();
    for sl in slices["items"].as_array().into_iter().flatten() {
        assert_eq!(
            sl["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io"
        );
        assert_eq!(sl["metadata"]["ownerReferences"][0]["kind"], "Service");
        assert_eq!(sl["addressType"], "IPv4");
        for ep in sl["endpoints"].as_array().into_iter().flatten() {
            assert_eq!(ep["targetRef"]["kind"], "Pod");
            assert!(
                ep["nodeName"].is_string(),
                "endpoint without nodeName: {ep}"
            );
            if ep["conditions"]["ready"] == true {
                assert_eq!(ep["conditions"]["serving"], true);
                for a in ep["addresses"].as_array().into_iter().flatten() {
                    ips.extend(a.as_str().map(str::to_owned));
                }
            }
        }
    }
    ips
}

/// Ready addresses of the Endpoints object `web`.
fn endpoints_ips(s: &ServerProcess) -> BTreeSet<String> {
    let (ok, out, _) = s
        .kubectl(&["get", "endpoints", "web", "-o", "json"])
        .expect("kubectl runs");
    if !ok {
        return BTreeSet::new();
    }
    let ep: Value = serde_json::from_str(&out).expect("json");
    ep["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|ss| ss["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a["ip"].as_str().map(str::to_owned))
        .collect()
}

/// Waits until `n` ready pods exist and both the slices and the Endpoints list exactly them.
fn wait_endpoints_follow(s: &ServerProcess, n: usize) -> BTreeSet<String> {
    wait_for(s, 120, &format!("{n} ready endpoints"), || {
        let pods = ready_pod_ips(s);
        if pods.len() != n {
            return None;
        }
        (slice_ready_ips(s) == pods && endpoints_ips(s) == pods).then_some(pods)
    })
}

#[test]
fn expose_deployment_gets_endpoint_slices_that_follow_scale() {
    let (_dir, s) = cluster();
    ok(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
            "--port=8080",
        ],
    );
    ok(
        &s,
        &[
            "expose",
            "deployment",
            "web",
            "--port=80",
            "--target-port=8080",
        ],
    );
    let ips = wait_endpoints_follow(&s, 2);
    // The Endpoints object carries the target port; the slice the service's port name.
    let ep = json(&s, &["get", "endpoints", "web", "-o", "json"]);
    assert_eq!(ep["subsets"][0]["ports"][0]["port"], 8080);
    let wide = ok(
        &s,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ],
    );
    assert!(wide.contains("8080"), "{wide}");
    for ip in &ips {
        assert!(wide.contains(ip.as_str()), "{ip} missing from {wide}");
    }

    ok(&s, &["scale", "deployment", "web", "--replicas=4"]);
    wait_endpoints_follow(&s, 4);
    ok(&s, &["scale", "deployment", "web", "--replicas=1"]);
    wait_endpoints_follow(&s, 1);

    // Deleting the service removes its Endpoints (controller) and slices (owner references).
    ok(&s, &["delete", "service", "web"]);
    wait_for(&s, 60, "Endpoints and slices gone", || {
        let eps = ok(&s, &["get", "endpoints", "-o", "name"]);
        let slices = ok(
            &s,
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=web",
                "-o",
                "name",
            ],
        );
        (!eps.contains("endpoints/web") && slices.trim().is_empty()).then_some(())
    });
}

#[test]
fn headless_service_with_named_target_port_and_not_ready_pods() {
    let (_dir, s) = cluster();
    // A bare pod behind a headless service that publishes not-ready addresses.
    let manifest = r#"
apiVersion: v1
kind: Pod
metadata: {name: db-0, labels: {app: db}}
spec:
  hostname: db-0
  subdomain: db
  containers: [{name: c, image: postgres, ports: [{name: pg, containerPort: 5432}]}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: db}
  ports: [{name: sql, port: 5433, targetPort: pg}]
"#;
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(created, "{err}");
    let ep = wait_for(&s, 90, "Endpoints db with an address", || {
        let (ok, out, _) = s.kubectl(&["get", "endpoints", "db", "-o", "json"]).ok()?;
        let v: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        v["subsets"][0]["addresses"][0]["ip"]
            .is_string()
            .then_some(v)
    });
    let ss = &ep["subsets"][0];
    assert_eq!(ss["ports"][0]["port"], 5432, "{ep}");
    assert_eq!(ss["ports"][0]["name"], "sql", "{ep}");
    assert_eq!(ss["addresses"][0]["hostname"], "db-0", "{ep}");
    assert_eq!(ss["addresses"][0]["targetRef"]["name"], "db-0", "{ep}");
    assert_eq!(
        ep["metadata"]["labels"]["service.kubernetes.io/headless"], "",
        "{ep}"
    );
    let slices = json(
        &s,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=db",
            "-o",
            "json",
        ],
    );
    let e0 = &slices["items"][0]["endpoints"][0];
    assert_eq!(e0["hostname"], "db-0", "{slices}");
    assert_eq!(e0["conditions"]["ready"], true, "{slices}");
    assert_eq!(slices["items"][0]["ports"][0]["port"], 5432, "{slices}");
}

#[test]
fn every_namespace_gets_a_default_service_account_and_the_root_ca() {
    let (_dir, s) = cluster();
    ok(&s, &["create", "namespace", "team-a"]);
    wait_for(&s, 60, "serviceaccount default in team-a", || {
        s.kubectl(&["get", "serviceaccount", "default", "-n", "team-a"])
            .ok()
            .filter(|(ok, _, _)| *ok)
    });
    // Deleted → recreated, with a new uid.
    let uid = ok(
        &s,
        &[
            "get",
            "sa",
            "default",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    ok(&s, &["delete", "sa", "default", "-n", "team-a"]);
    wait_for(&s, 60, "serviceaccount default recreated", || {
        let (ok, out, _) = s
            .kubectl(&[
                "get",
                "sa",
                "default",
                "-n",
                "team-a",
                "-o",
                "jsonpath={.metadata.uid}",
            ])
            .ok()?;
        (ok && !out.is_empty() && out != uid).then_some(())
    });
    // The CA bundle, the same one the admin kubeconfig trusts.
    let ca = wait_for(&s, 60, "kube-root-ca.crt in team-a", || {
        let (ok, out, _) = s
            .kubectl(&[
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-n",
                "team-a",
                "-o",
                "json",
            ])
            .ok()?;
        let v: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        v["data"]["ca.crt"].as_str().map(str::to_owned)
    });
    assert!(ca.contains("BEGIN CERTIFICATE"), "{ca}");
    // Edited → restored.
    ok(
        &s,
        &[
            "patch",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"data":{"ca.crt":"tampered"}}"#,
        ],
    );
    wait_for(&s, 60, "kube-root-ca.crt restored", || {
        let out = ok(
            &s,
            &[
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-n",
                "team-a",
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ],
        );
        (out == ca).then_some(())
    });
}

#[test]
fn resource_quota_status_tracks_usage_so_admission_can_charge_it() {
    let (_dir, s) = cluster();
    ok(&s, &["create", "namespace", "q"]);
    ok(
        &s,
        &[
            "create",
            "quota",
            "limits",
            "-n",
            "q",
            "--hard=pods=2,requests.cpu=1,configmaps=5,services=1",
        ],
    );
    let used = |s: &ServerProcess| {
        let v = json(s, &["get", "quota", "limits", "-n", "q", "-o", "json"]);
        v["status"]["used"].clone()
    };
    wait_for(&s, 60, "quota status computed", || {
        let u = used(&s);
        // The root CA ConfigMap is already there.
        (u["pods"] == "0" && u["configmaps"] == "1" && u["requests.cpu"] == "0").then_some(())
    });
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: q}}\nspec:\n  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: 300m}}}}}}]\n"
        )
    };
    for name in ["a", "b"] {
        let (created, _, err) = s
            .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&pod(name)))
            .expect("kubectl runs");
        assert!(created, "{err}");
    }
    wait_for(&s, 60, "usage of two pods", || {
        let u = used(&s);
        (u["pods"] == "2" && u["requests.cpu"] == "600m").then_some(())
    });
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&pod("c")))
        .expect("kubectl runs");
    assert!(!created, "a third pod passed the quota");
    assert!(err.contains("exceeded quota: limits"), "{err}");
    // Deleting a pod frees its share.
    ok(&s, &["delete", "pod", "a", "-n", "q", "--wait=false"]);
    wait_for(&s, 90, "usage back to one pod", || {
        let u = used(&s);
        (u["pods"] == "1" && u["requests.cpu"] == "300m").then_some(())
    });
}

#[test]
fn aggregated_cluster_roles_follow_the_roles_their_selectors_pick() {
    let (_dir, s) = cluster();
    let manifest = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: monitoring}
aggregationRule:
  clusterRoleSelectors:
  - matchLabels: {example.com/aggregate-to-monitoring: "true"}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: monitoring-pods
  labels: {example.com/aggregate-to-monitoring: "true"}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
"#;
    let (applied, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(applied, "{err}");
    let rules = |s: &ServerProcess| {
        json(s, &["get", "clusterrole", "monitoring", "-o", "json"])["rules"].clone()
    };
    wait_for(&s, 60, "monitoring aggregates pods", || {
        let r = rules(&s);
        (r.as_array().map(Vec::len) == Some(1) && r[0]["resources"][0] == "pods").then_some(())
    });
    ok(
        &s,
        &[
            "create",
            "clusterrole",
            "monitoring-nodes",
            "--verb=get,list",
            "--resource=nodes",
        ],
    );
    ok(
        &s,
        &[
            "label",
            "clusterrole",
            "monitoring-nodes",
            "example.com/aggregate-to-monitoring=true",
        ],
    );
    wait_for(&s, 60, "monitoring aggregates nodes too", || {
        (rules(&s).as_array().map(Vec::len) == Some(2)).then_some(())
    });
    ok(&s, &["delete", "clusterrole", "monitoring-pods"]);
    wait_for(&s, 60, "monitoring drops pods", || {
        let r = rules(&s);
        (r.as_array().map(Vec::len) == Some(1) && r[0]["resources"][0] == "nodes").then_some(())
    });
    // The built-in aggregated roles stay aggregated: admin includes edit's rules.
    let admin = json(&s, &["get", "clusterrole", "admin", "-o", "json"]);
    assert!(
        admin["rules"].as_array().map(Vec::len).unwrap_or(0) > 5,
        "{admin}"
    );
}
