//! Service type changes and node-port allocation, as kube-apiserver's Service registry
//! (strategy `dropTypeDependentFields`, allocator `allocateUpdate`), driven by stock kubectl:
//!
//! - `kubectl patch` of a LoadBalancer to `type: ClusterIP` drops its node ports,
//!   `allocateLoadBalancerNodePorts` and its load-balancer status (instead of a 422), and
//!   the node port is free again for another Service; asking for a new node port in the
//!   same patch is still refused; back to NodePort allocates one again.
//! - A change to ExternalName releases the cluster IP, and back to ClusterIP allocates one.
//! - `spec.allocateLoadBalancerNodePorts: false` gives a LoadBalancer no node ports (but
//!   keeps one asked for); switching it to true allocates them. `externalTrafficPolicy:
//!   Local` on a LoadBalancer allocates a `healthCheckNodePort`, freed when it goes back.
//! - A Service deleted by removing its last finalizer (a load balancer's cleanup) frees its
//!   cluster IP and node ports, as a DELETE does.

use e2e::ServerProcess;
use e2e::cli::{apply, json, ok};
use serde_json::Value;

fn node_ports(svc: &Value) -> Vec<u64> {
    svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["nodePort"].as_u64())
        .collect()
}

fn get(s: &ServerProcess, name: &str) -> Value {
    json(s, &["get", "service", name, "-o", "json"])
}

#[test]
fn changing_a_service_type_drops_and_allocates_what_the_types_need() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&tmp.path().join("data")).expect("start");

    ok(
        &s,
        &["create", "service", "loadbalancer", "lb", "--tcp=80:8080"],
    );
    let svc = get(&s, "lb");
    let ports = node_ports(&svc);
    assert_eq!(ports.len(), 1, "{svc}");
    assert!((30000..=32767).contains(&ports[0]), "{svc}");
    assert_eq!(svc["spec"]["allocateLoadBalancerNodePorts"], true, "{svc}");
    // A load-balancer status, as a controller writes it.
    ok(
        &s,
        &[
            "patch",
            "service",
            "lb",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"127.0.100.9"}]}}}"#,
        ],
    );

    // Asking for a node port the Service did not hold, on a ClusterIP: still refused.
    let other = if ports[0] == 31999 { 31998 } else { 31999 };
    let change = format!(
        r#"[{{"op":"replace","path":"/spec/type","value":"ClusterIP"}},{{"op":"replace","path":"/spec/ports/0/nodePort","value":{other}}}]"#
    );
    let (refused, _, err) = s
        .kubectl(&["patch", "service", "lb", "--type=json", "-p", &change])
        .expect("kubectl");
    assert!(
        !refused,
        "a new node port on a ClusterIP Service was accepted"
    );
    assert!(
        err.contains(
            "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
        ),
        "{err}"
    );

    // The type alone: accepted, node ports and LoadBalancer fields dropped.
    ok(
        &s,
        &[
            "patch",
            "service",
            "lb",
            "-p",
            r#"{"spec":{"type":"ClusterIP"}}"#,
        ],
    );
    let svc = get(&s, "lb");
    assert_eq!(svc["spec"]["type"], "ClusterIP", "{svc}");
    assert!(node_ports(&svc).is_empty(), "{svc}");
    assert!(
        svc["spec"].get("allocateLoadBalancerNodePorts").is_none(),
        "{svc}"
    );
    assert!(svc["spec"].get("externalTrafficPolicy").is_none(), "{svc}");
    assert!(
        svc["status"]["loadBalancer"]
            .get("ingress")
            .is_none_or(Value::is_null),
        "{svc}"
    );
    let cluster_ip = svc["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_owned();

    // The released node port is free for another Service.
    let freed = ports[0].to_string();
    ok(
        &s,
        &[
            "create",
            "service",
            "nodeport",
            "np",
            "--tcp=81:8080",
            &format!("--node-port={freed}"),
        ],
    );
    assert_eq!(node_ports(&get(&s, "np")), ports);

    // Back to NodePort: a node port is allocated again, the cluster IP is kept.
    ok(
        &s,
        &[
            "patch",
            "service",
            "lb",
            "-p",
            r#"{"spec":{"type":"NodePort"}}"#,
        ],
    );
    let svc = get(&s, "lb");
    let again = node_ports(&svc);
    assert_eq!(again.len(), 1, "{svc}");
    assert_ne!(again, ports, "{svc}");
    assert_eq!(svc["spec"]["clusterIP"], cluster_ip.as_str(), "{svc}");

    // To ExternalName: no cluster IP, no node port; the IP can be taken by another Service.
    ok(
        &s,
        &[
            "patch",
            "service",
            "lb",
            "-p",
            r#"{"spec":{"type":"ExternalName","externalName":"example.com"}}"#,
        ],
    );
    let svc = get(&s, "lb");
    assert!(svc["spec"].get("clusterIP").is_none(), "{svc}");
    assert!(node_ports(&svc).is_empty(), "{svc}");
    apply(
        &s,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: reuse\nspec:\n  clusterIP: {cluster_ip}\n  ports:\n  - port: 80\n"
        ),
    );
    // And back to ClusterIP: a new cluster IP.
    ok(
        &s,
        &[
            "patch",
            "service",
            "lb",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/type","value":"ClusterIP"},{"op":"remove","path":"/spec/externalName"}]"#,
        ],
    );
    let svc = get(&s, "lb");
    let ip = svc["spec"]["clusterIP"].as_str().unwrap_or("");
    assert!(!ip.is_empty() && ip != cluster_ip, "{svc}");
}

#[test]
fn load_balancers_without_node_ports() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&tmp.path().join("data")).expect("start");

    apply(
        &s,
        r#"
apiVersion: v1
kind: Service
metadata:
  name: bare
spec:
  type: LoadBalancer
  allocateLoadBalancerNodePorts: false
  ports:
  - {name: a, port: 80}
  - {name: b, port: 81}
"#,
    );
    let svc = get(&s, "bare");
    assert!(node_ports(&svc).is_empty(), "{svc}");
    assert_eq!(svc["spec"]["allocateLoadBalancerNodePorts"], false, "{svc}");

    // A node port asked for is still allocated (and held: nobody else gets it).
    let wanted = 30000 + u64::from(std::process::id() % 2000);
    apply(
        &s,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: one\nspec:\n  type: LoadBalancer\n  allocateLoadBalancerNodePorts: false\n  ports:\n  - {{name: a, port: 80, nodePort: {wanted}}}\n  - {{name: b, port: 81}}\n"
        ),
    );
    assert_eq!(node_ports(&get(&s, "one")), [wanted]);
    let (taken, _, err) = s
        .kubectl(&[
            "create",
            "service",
            "nodeport",
            "clash",
            "--tcp=80:80",
            &format!("--node-port={wanted}"),
        ])
        .expect("kubectl");
    assert!(!taken, "a held node port was given twice");
    assert!(err.contains("provided port is already allocated"), "{err}");

    // Switched on: every port gets one.
    ok(
        &s,
        &[
            "patch",
            "service",
            "bare",
            "-p",
            r#"{"spec":{"allocateLoadBalancerNodePorts":true}}"#,
        ],
    );
    let svc = get(&s, "bare");
    assert_eq!(node_ports(&svc).len(), 2, "{svc}");

    // externalTrafficPolicy: Local gives a health-check node port; back to Cluster frees it.
    ok(
        &s,
        &[
            "patch",
            "service",
            "bare",
            "-p",
            r#"{"spec":{"externalTrafficPolicy":"Local"}}"#,
        ],
    );
    let svc = get(&s, "bare");
    let hc = svc["spec"]["healthCheckNodePort"].as_u64().unwrap_or(0);
    assert!((30000..=32767).contains(&hc), "{svc}");
    assert!(!node_ports(&svc).contains(&hc), "{svc}");
    ok(
        &s,
        &[
            "patch",
            "service",
            "bare",
            "-p",
            r#"{"spec":{"externalTrafficPolicy":"Cluster"}}"#,
        ],
    );
    let svc = get(&s, "bare");
    assert!(svc["spec"].get("healthCheckNodePort").is_none(), "{svc}");
    ok(
        &s,
        &[
            "create",
            "service",
            "nodeport",
            "reuse-hc",
            "--tcp=80:80",
            &format!("--node-port={hc}"),
        ],
    );

    // The field belongs to LoadBalancers only.
    let (ok_, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some("apiVersion: v1\nkind: Service\nmetadata:\n  name: cip\nspec:\n  allocateLoadBalancerNodePorts: false\n  ports:\n  - port: 80\n"),
        )
        .expect("kubectl");
    assert!(
        !ok_,
        "allocateLoadBalancerNodePorts accepted on a ClusterIP Service"
    );
    assert!(
        err.contains("spec.allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is 'LoadBalancer'"),
        "{err}"
    );
}

#[test]
fn a_service_deleted_by_its_last_finalizer_frees_its_addresses() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&tmp.path().join("data")).expect("start");
    let svc = |name: &str, finalizers: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, finalizers: [{finalizers}]}}\nspec: {{type: NodePort, clusterIP: 10.96.77.77, selector: {{app: x}}, ports: [{{port: 80, nodePort: 31777}}]}}\n"
        )
    };
    apply(&s, &svc("held", "example.com/hold"));
    ok(&s, &["delete", "service", "held", "--wait=false"]);
    let (_, found, _) = s
        .kubectl(&["get", "service", "held"])
        .expect("kubectl runs");
    assert!(found.contains("held"), "deleted before its finalizer went");
    ok(
        &s,
        &[
            "patch",
            "service",
            "held",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    );
    let (gone, _, err) = s
        .kubectl(&["get", "service", "held"])
        .expect("kubectl runs");
    assert!(!gone && err.contains("NotFound"), "{err}");
    // The same cluster IP and node port are free for the next Service.
    apply(&s, &svc("next", ""));
    let next = get(&s, "next");
    assert_eq!(next["spec"]["clusterIP"], "10.96.77.77", "{next}");
    assert_eq!(node_ports(&next), vec![31777], "{next}");
}
