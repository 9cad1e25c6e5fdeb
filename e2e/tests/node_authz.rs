//! The node authorizer and NodeRestriction admission with stock kubectl acting as a
//! kubelet (`--as system:node:<name> --as-group system:nodes`), on a bare server: graph
//! checks for secrets of pods bound to the node, the node's own Node object, pods listed by
//! `spec.nodeName`, its own Lease, label restrictions, deletes of pods bound elsewhere;
//! upstream's Forbidden texts; `kubectl auth can-i` as a node; and `pods/binding`
//! (PodScheduled set with spec.nodeName, 409 when already bound).

use e2e::ServerProcess;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn admin(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(ok, "kubectl {args:?} failed: {err}\nlog: {}", s.log());
    out
}

fn admin_stdin(s: &ServerProcess, args: &[&str], stdin: &str) -> String {
    let (ok, out, err) = s
        .kubectl_as(&s.kubeconfig, args, Some(stdin))
        .expect("kubectl runs");
    assert!(ok, "kubectl {args:?} failed: {err}\nlog: {}", s.log());
    out
}

/// kubectl as node `node`: (success, stdout, stderr).
fn as_node(s: &ServerProcess, node: &str, args: &[&str]) -> (bool, String, String) {
    let user = format!("--as=system:node:{node}");
    let mut full = vec![user.as_str(), "--as-group=system:nodes"];
    full.extend_from_slice(args);
    s.kubectl(&full).expect("kubectl runs")
}

fn refused(s: &ServerProcess, node: &str, args: &[&str], message: &str) {
    let (ok, out, err) = as_node(s, node, args);
    assert!(!ok, "{args:?} as {node} should fail: {out}");
    assert!(
        err.contains(message),
        "{args:?} as {node}: want {message:?}, got {err}"
    );
}

fn allowed(s: &ServerProcess, node: &str, args: &[&str]) -> String {
    let (ok, out, err) = as_node(s, node, args);
    assert!(ok, "{args:?} as {node} failed: {err}\nlog: {}", s.log());
    out
}

fn node_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n"
    )
}

fn pod_yaml(name: &str, node: Option<&str>, secret: &str) -> String {
    let node = node.map_or(String::new(), |n| format!("  nodeName: {n}\n"));
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{node}  containers:\n  - name: app\n    image: nginx\n    env:\n    - name: PASSWORD\n      valueFrom:\n        secretKeyRef:\n          name: {secret}\n          key: password\n"
    )
}

#[test]
fn nodes_reach_only_what_their_pods_reference() {
    let (_d, s) = server();
    for n in ["n1", "n2"] {
        admin_stdin(&s, &["create", "-f", "-"], &node_yaml(n));
    }
    for secret in ["db", "other"] {
        admin(
            &s,
            &[
                "create",
                "secret",
                "generic",
                secret,
                "--from-literal=password=x",
            ],
        );
    }
    admin_stdin(
        &s,
        &["create", "-f", "-"],
        &pod_yaml("web", Some("n1"), "db"),
    );
    admin_stdin(
        &s,
        &["create", "-f", "-"],
        &pod_yaml("api", Some("n2"), "other"),
    );

    // Secrets: only those referenced by pods bound to the node.
    let got = allowed(&s, "n1", &["get", "secret", "db", "-o", "name"]);
    assert_eq!(got.trim(), "secret/db");
    refused(
        &s,
        "n1",
        &["get", "secret", "other"],
        "Error from server (Forbidden): secrets \"other\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'n1' and this object",
    );
    refused(
        &s,
        "n1",
        &["get", "secrets"],
        "cannot list resource \"secrets\" in API group \"\" in the namespace \"default\": No Object name found",
    );

    // Nodes: its own Node only.
    let own = allowed(&s, "n1", &["get", "node", "n1", "-o", "name"]);
    assert_eq!(own.trim(), "node/n1");
    refused(
        &s,
        "n1",
        &["get", "nodes"],
        "nodes is forbidden: User \"system:node:n1\" cannot list resource \"nodes\" in API group \"\" at the cluster scope: node 'n1' cannot read all nodes, only its own Node object",
    );
    refused(
        &s,
        "n1",
        &["get", "node", "n2"],
        "node 'n1' cannot read 'n2', only its own Node object",
    );

    // Pods: listed by spec.nodeName only; deleted only when bound to the node.
    let mine = allowed(
        &s,
        "n1",
        &[
            "get",
            "pods",
            "-A",
            "--field-selector=spec.nodeName=n1",
            "-o",
            "name",
        ],
    );
    assert_eq!(mine.trim(), "pod/web");
    refused(
        &s,
        "n1",
        &["get", "pods"],
        "can only list/watch pods with spec.nodeName field selector",
    );
    refused(
        &s,
        "n1",
        &["delete", "pod", "api", "--wait=false"],
        "pods \"Unknown\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself",
    );

    // Its own Node: kubelet labels yes, restricted labels and other nodes no.
    allowed(&s, "n1", &["label", "node", "n1", "team=a"]);
    refused(
        &s,
        "n1",
        &[
            "label",
            "node",
            "n1",
            "node-role.kubernetes.io/control-plane=",
        ],
        "nodes \"n1\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/control-plane",
    );
    // (kubectl replace PUTs without reading first, so admission answers.)
    let (ok, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &[
                "--as=system:node:n1",
                "--as-group=system:nodes",
                "replace",
                "-f",
                "-",
            ],
            Some(&node_yaml("n2")),
        )
        .expect("kubectl");
    assert!(!ok);
    assert!(
        err.contains("nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""),
        "{err}"
    );
    refused(
        &s,
        "n1",
        &["taint", "node", "n1", "dedicated=x:NoSchedule"],
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints",
    );

    // Leases: its own, in kube-node-lease.
    let lease = |name: &str, ns: &str| {
        format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  holderIdentity: {name}\n"
        )
    };
    let (ok, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &[
                "--as=system:node:n1",
                "--as-group=system:nodes",
                "create",
                "-f",
                "-",
            ],
            Some(&lease("n1", "kube-node-lease")),
        )
        .expect("kubectl");
    assert!(ok, "own lease: {err}");
    let (ok, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &[
                "--as=system:node:n1",
                "--as-group=system:nodes",
                "create",
                "-f",
                "-",
            ],
            Some(&lease("n2", "kube-node-lease")),
        )
        .expect("kubectl");
    assert!(!ok);
    assert!(
        err.contains("leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same name as the requesting node"),
        "{err}"
    );

    // Everything else: the static node rules (events yes, namespaces no).
    refused(
        &s,
        "n1",
        &["create", "namespace", "x"],
        "namespaces is forbidden: User \"system:node:n1\" cannot create resource \"namespaces\" in API group \"\" at the cluster scope",
    );

    // kubectl auth can-i as a node.
    let can = |node: &str, args: &[&str]| {
        let mut full = vec!["auth", "can-i"];
        full.extend_from_slice(args);
        let (_, out, _) = as_node(&s, node, &full);
        out.split_whitespace().next().unwrap_or_default().to_owned()
    };
    assert_eq!(can("n1", &["get", "secret/db"]), "yes");
    assert_eq!(can("n2", &["get", "secret/db"]), "no");
    assert_eq!(can("n1", &["get", "node/n1"]), "yes");
    assert_eq!(can("n1", &["list", "nodes"]), "no");
    assert_eq!(can("n1", &["create", "events"]), "yes");
    let (_, list, err) = as_node(&s, "n1", &["auth", "can-i", "--list"]);
    assert!(list.contains("selfsubjectaccessreviews"), "{list}");
    assert!(
        err.contains("node authorizer does not support user rule resolution"),
        "{err}"
    );

    // A pod bound later becomes reachable (the graph follows the store).
    admin_stdin(&s, &["create", "-f", "-"], &pod_yaml("late", None, "other"));
    assert_eq!(can("n1", &["get", "secret/other"]), "no");
    let binding = r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"late"},"target":{"apiVersion":"v1","kind":"Node","name":"n1"}}"#;
    let path = "/api/v1/namespaces/default/pods/late/binding";
    admin_stdin(&s, &["create", "--raw", path, "-f", "-"], binding);
    assert_eq!(can("n1", &["get", "secret/other"]), "yes");
    let cond = admin(
        &s,
        &[
            "get",
            "pod",
            "late",
            "-o",
            "jsonpath={.spec.nodeName} {.status.conditions[?(@.type==\"PodScheduled\")].status}",
        ],
    );
    assert_eq!(cond, "n1 True");
    let (ok, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "--raw", path, "-f", "-"],
            Some(binding),
        )
        .expect("kubectl");
    assert!(!ok);
    assert!(
        err.contains("Operation cannot be fulfilled on pods/binding \"late\": pod late is already assigned to node \"n1\""),
        "{err}"
    );
}

/// `kubectl logs`, `exec`, `attach`, `port-forward` and `get --raw .../nodes/N/proxy`: no
/// kubelet runs here, so each gets a 400 saying why (pods on a simulated node), or
/// upstream's answer for a pod without a host.
#[test]
fn kubelet_subresources_explain_that_nodes_are_simulated() {
    let (_d, s) = server();
    admin_stdin(
        &s,
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: sim-0\n  annotations:\n    capstan.io/simulated: \"true\"\n",
    );
    let pod = |name: &str, node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{node}  containers:\n  - name: app\n    image: nginx\n    ports:\n    - containerPort: 80\n  - name: sidecar\n    image: busybox\n"
        )
    };
    admin_stdin(
        &s,
        &["create", "-f", "-"],
        &pod("web", "  nodeName: sim-0\n"),
    );
    admin_stdin(&s, &["create", "-f", "-"], &pod("pending", ""));
    // kubectl checks the phase before port-forward and attach.
    admin(
        &s,
        &[
            "patch",
            "pod",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Running"}}"#,
        ],
    );
    let fails = |args: &[&str], want: &str| {
        let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
        assert!(!ok, "{args:?} should fail: {out}");
        assert!(err.contains(want), "{args:?}: want {want:?}, got {err}");
    };
    let sim = "pod \"web\" runs on simulated node \"sim-0\": no container runs there";
    fails(
        &["logs", "web", "-c", "app"],
        &format!("Error from server (BadRequest): {sim}, so it has no logs"),
    );
    fails(
        &["exec", "web", "-c", "app", "--", "ls"],
        &format!("Error from server (BadRequest): {sim}, so there is nothing to exec into"),
    );
    fails(
        &["attach", "web", "-c", "app"],
        &format!("{sim}, so there is nothing to attach to"),
    );
    fails(
        &["port-forward", "pod/web", "18080:80"],
        &format!("{sim}, so there is no port to forward to"),
    );
    fails(
        &["get", "--raw", "/api/v1/nodes/sim-0/proxy/stats/summary"],
        "node \"sim-0\" is simulated: no kubelet runs there, so there is nothing to proxy to",
    );
    // Container checks come first, as upstream's.
    fails(
        &["get", "--raw", "/api/v1/namespaces/default/pods/web/log"],
        "a container name must be specified for pod web, choose one of: [app sidecar]",
    );
    fails(
        &["logs", "web", "-c", "nope"],
        "container nope is not valid for pod web",
    );
    // A pod without a host: empty logs, and exec is refused as upstream.
    let logs = admin(&s, &["logs", "pending", "-c", "app"]);
    assert_eq!(logs, "");
    fails(
        &["exec", "pending", "-c", "app", "--", "ls"],
        "Error from server (BadRequest): pod pending does not have a host assigned",
    );
    // Discovery lists the subresources kubectl looks for.
    let resources = admin(&s, &["get", "--raw", "/api/v1"]);
    for sub in [
        "pods/log",
        "pods/exec",
        "pods/attach",
        "pods/portforward",
        "pods/eviction",
    ] {
        assert!(
            resources.contains(&format!("\"{sub}\"")),
            "{sub} in /api/v1"
        );
    }
}
