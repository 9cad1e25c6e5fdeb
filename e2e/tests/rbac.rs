//! RBAC with stock kubectl: the bootstrap policy, `kubectl auth can-i` (with `--list`,
//! `--as`, `--as-group`), `kubectl auth whoami`, upstream's Forbidden texts and escalation
//! prevention.

use std::path::{Path, PathBuf};

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

fn user(s: &ServerProcess, dir: &Path, name: &str, groups: &[&str]) -> PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    let mut args = vec![
        "kubeconfig",
        "--data-dir",
        s.data_dir.to_str().unwrap_or_default(),
        "--user",
        name,
        "--server",
        &s.url,
        "--out",
        path.to_str().unwrap_or_default(),
    ];
    for g in groups {
        args.push("--group");
        args.push(g);
    }
    let (made, _, err) = s.capstan(&args).expect("capstan kubeconfig");
    assert!(made, "{err}");
    path
}

/// `kubectl auth can-i` as `kubeconfig`: the answer's first word.
fn can_i(s: &ServerProcess, kubeconfig: &Path, args: &[&str]) -> String {
    let mut full = vec!["auth", "can-i"];
    full.extend_from_slice(args);
    let (_, out, err) = s.kubectl_as(kubeconfig, &full, None).expect("kubectl");
    let answer = out.split_whitespace().next().unwrap_or_default().to_owned();
    assert!(
        answer == "yes" || answer == "no",
        "can-i {args:?}: {out} {err}"
    );
    answer
}

#[test]
fn rbac_can_i_matrix_forbidden_texts_escalation_and_whoami() {
    let (d, s) = server();
    let alice = user(&s, d.path(), "alice", &["devs"]);
    let bob = user(&s, d.path(), "bob", &[]);
    for ns in ["team", "ops"] {
        admin(&s, &["create", "namespace", ns]);
    }
    admin(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "alice-view",
            "--clusterrole=view",
            "--user=alice",
        ],
    );
    admin(
        &s,
        &[
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
            "-n",
            "team",
        ],
    );
    admin(
        &s,
        &[
            "create",
            "rolebinding",
            "alice-admin",
            "--clusterrole=admin",
            "--user=alice",
            "-n",
            "ops",
        ],
    );
    admin(
        &s,
        &[
            "create",
            "role",
            "app-secret-reader",
            "--verb=get",
            "--resource=secrets",
            "--resource-name=app-secret",
        ],
    );
    admin(
        &s,
        &[
            "create",
            "rolebinding",
            "devs-app-secret",
            "--role=app-secret-reader",
            "--group=devs",
        ],
    );

    // Alice: `view` everywhere (ClusterRoleBinding), `edit` in team, `admin` in ops, one
    // named secret in default through her group; discovery and basic-user for everyone.
    let cases: &[(&[&str], &str)] = &[
        (&["get", "pods"], "yes"),
        (&["list", "pods", "-n", "default"], "yes"),
        (&["watch", "pods"], "yes"),
        (&["create", "pods"], "no"),
        (&["delete", "pods"], "no"),
        (&["get", "pods", "--subresource=log"], "yes"),
        (&["create", "pods", "--subresource=exec"], "no"),
        (
            &["create", "pods", "--subresource=exec", "-n", "team"],
            "yes",
        ),
        (&["get", "deployments.apps"], "yes"),
        (&["get", "deployments.apps", "--subresource=scale"], "yes"),
        (&["update", "deployments.apps", "--subresource=scale"], "no"),
        (
            &[
                "update",
                "deployments.apps",
                "--subresource=scale",
                "-n",
                "team",
            ],
            "yes",
        ),
        (&["create", "pods", "-n", "team"], "yes"),
        (&["delete", "deployments.apps", "-n", "team"], "yes"),
        (&["get", "secrets"], "no"),
        (&["list", "secrets"], "no"),
        (&["get", "secrets", "-n", "team"], "yes"),
        (&["get", "secrets/app-secret"], "yes"),
        (&["get", "secrets/other-secret"], "no"),
        (&["update", "secrets/app-secret"], "no"),
        (
            &["create", "roles.rbac.authorization.k8s.io", "-n", "team"],
            "no",
        ),
        (
            &[
                "create",
                "rolebindings.rbac.authorization.k8s.io",
                "-n",
                "team",
            ],
            "no",
        ),
        (
            &["create", "roles.rbac.authorization.k8s.io", "-n", "ops"],
            "yes",
        ),
        (&["get", "nodes"], "no"),
        (&["list", "namespaces"], "yes"),
        (&["delete", "namespaces"], "no"),
        (&["get", "/healthz"], "yes"),
        (&["get", "/api"], "yes"),
        (&["get", "/apis/apps/v1"], "yes"),
        (&["get", "/metrics"], "no"),
        (&["post", "/healthz"], "no"),
        (&["list", "pods", "--all-namespaces"], "yes"),
        (&["create", "pods", "--all-namespaces"], "no"),
        (&["get", "clusterroles.rbac.authorization.k8s.io"], "no"),
        (&["get", "configmaps", "-n", "kube-system"], "yes"),
        (&["get", "leases.coordination.k8s.io", "-n", "team"], "yes"),
        (&["get", "leases.coordination.k8s.io"], "no"),
        (&["impersonate", "serviceaccounts", "-n", "team"], "yes"),
        (&["impersonate", "users"], "no"),
        (&["watch", "jobs.batch"], "yes"),
        (&["create", "cronjobs.batch", "-n", "team"], "yes"),
        (&["patch", "services"], "no"),
        (&["get", "endpointslices.discovery.k8s.io"], "yes"),
        (&["get", "poddisruptionbudgets.policy", "-n", "team"], "yes"),
        (&["*", "*"], "no"),
    ];
    let mut wrong = Vec::new();
    for (args, want) in cases {
        let got = can_i(&s, &alice, args);
        if got != *want {
            wrong.push(format!("alice can-i {args:?}: got {got}, want {want}"));
        }
    }
    // The admin (system:masters) asks on others' behalf through impersonation.
    let admin_cfg = s.kubeconfig.clone();
    let as_cases: &[(&[&str], &str)] = &[
        (&["*", "*"], "yes"),
        (&["create", "pods", "--as", "alice"], "no"),
        (&["create", "pods", "--as", "alice", "-n", "team"], "yes"),
        (&["get", "pods", "--as", "bob"], "no"),
        (&["get", "/healthz", "--as", "bob"], "yes"),
        (
            &[
                "get",
                "secrets/app-secret",
                "--as",
                "bob",
                "--as-group",
                "devs",
            ],
            "yes",
        ),
        (
            &[
                "delete",
                "nodes",
                "--as",
                "bob",
                "--as-group",
                "system:masters",
            ],
            "yes",
        ),
        (
            &[
                "list",
                "secrets",
                "-n",
                "kube-system",
                "--as",
                "system:serviceaccount:kube-system:namespace-controller",
            ],
            "yes",
        ),
        (
            &[
                "create",
                "pods",
                "--as",
                "system:serviceaccount:kube-system:namespace-controller",
            ],
            "no",
        ),
        (&["get", "nodes", "--as", "system:kube-scheduler"], "yes"),
    ];
    for (args, want) in as_cases {
        let got = can_i(&s, &admin_cfg, args);
        if got != *want {
            wrong.push(format!("admin can-i {args:?}: got {got}, want {want}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Aggregation: a ClusterRole labelled aggregate-to-view extends `view` at once.
    let node_viewer = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
        "metadata":{"name":"node-viewer","labels":{"rbac.authorization.k8s.io/aggregate-to-view":"true"}},
        "rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get"]}]}"#;
    let (ok, _, err) = s
        .kubectl_as(&admin_cfg, &["create", "-f", "-"], Some(node_viewer))
        .expect("kubectl");
    assert!(ok, "{err}");
    assert_eq!(can_i(&s, &alice, &["get", "nodes"]), "yes");

    // Bob has nothing but the defaults.
    assert_eq!(can_i(&s, &bob, &["list", "pods"]), "no");
    assert_eq!(can_i(&s, &bob, &["get", "/version"]), "yes");

    // can-i --list.
    let (ok, out, err) = s
        .kubectl_as(&alice, &["auth", "can-i", "--list", "-n", "team"], None)
        .expect("kubectl");
    assert!(ok, "{err}");
    assert!(out.contains("Resources"), "{out}");
    assert!(out.contains("selfsubjectaccessreviews"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("pods ") && l.contains("create")),
        "{out}"
    );
    assert!(out.contains("[/healthz]"), "{out}");

    // Upstream's Forbidden texts for alice with `view`.
    admin(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "-n",
            "default",
        ],
    );
    admin(&s, &["create", "configmap", "c", "--from-literal=a=b"]);
    let forbidden: &[(&[&str], &str)] = &[
        (
            &["create", "deployment", "web2", "--image=nginx"],
            "deployments.apps is forbidden: User \"alice\" cannot create resource \"deployments\" in API group \"apps\" in the namespace \"default\"",
        ),
        (
            &["delete", "configmap", "c"],
            "Error from server (Forbidden): configmaps \"c\" is forbidden: User \"alice\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\"",
        ),
        (
            &["patch", "configmap", "c", "-p", r#"{"data":{"a":"x"}}"#],
            "Error from server (Forbidden): configmaps \"c\" is forbidden: User \"alice\" cannot patch resource \"configmaps\" in API group \"\" in the namespace \"default\"",
        ),
        (
            &["scale", "deployment", "web", "--replicas=3"],
            "deployments.apps \"web\" is forbidden: User \"alice\" cannot patch resource \"deployments/scale\" in API group \"apps\" in the namespace \"default\"",
        ),
    ];
    for (args, text) in forbidden {
        let (ok, _, err) = s.kubectl_as(&alice, args, None).expect("kubectl");
        assert!(!ok && err.contains(text), "{args:?}: {err}");
    }

    // Escalation: alice administers ops but holds nothing on nodes nor cluster-admin.
    let (ok, _, err) = s
        .kubectl_as(
            &alice,
            &[
                "create",
                "role",
                "small",
                "--verb=get",
                "--resource=pods",
                "-n",
                "ops",
            ],
            None,
        )
        .expect("kubectl");
    assert!(ok, "{err}");
    let (ok, _, err) = s
        .kubectl_as(
            &alice,
            &[
                "create",
                "role",
                "big",
                "--verb=list",
                "--resource=nodes",
                "-n",
                "ops",
            ],
            None,
        )
        .expect("kubectl");
    assert!(!ok, "escalation allowed");
    assert!(
        err.contains("roles.rbac.authorization.k8s.io \"big\" is forbidden: user \"alice\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"list\"]}"),
        "{err}"
    );
    let (ok, _, err) = s
        .kubectl_as(
            &alice,
            &[
                "create",
                "rolebinding",
                "root",
                "--clusterrole=cluster-admin",
                "--user=alice",
                "-n",
                "ops",
            ],
            None,
        )
        .expect("kubectl");
    assert!(
        !ok && err.contains(
            "rolebindings.rbac.authorization.k8s.io \"root\" is forbidden: user \"alice\""
        ),
        "{err}"
    );
    // Binding a role she holds is fine, and takes effect for her next request.
    let (ok, _, err) = s
        .kubectl_as(
            &alice,
            &[
                "create",
                "rolebinding",
                "bob-small",
                "--role=small",
                "--user=bob",
                "-n",
                "ops",
            ],
            None,
        )
        .expect("kubectl");
    assert!(ok, "{err}");
    assert_eq!(can_i(&s, &bob, &["get", "pods", "-n", "ops"]), "yes");

    // Impersonation without the verb.
    let (ok, _, err) = s
        .kubectl_as(&alice, &["get", "pods", "--as", "bob"], None)
        .expect("kubectl");
    assert!(
        !ok && err.contains("users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
        "{err}"
    );

    // whoami.
    let (ok, out, err) = s
        .kubectl_as(&alice, &["auth", "whoami"], None)
        .expect("kubectl");
    assert!(ok, "{err}");
    assert!(
        out.contains("alice") && out.contains("[devs system:authenticated]"),
        "{out}"
    );
    let out = admin(&s, &["auth", "whoami", "-o", "json"]);
    assert!(out.contains("system:masters"), "{out}");
}

#[test]
fn patches_of_roles_cannot_escalate_either() {
    let (dir, s) = server();
    admin(&s, &["create", "namespace", "team"]);
    admin(
        &s,
        &[
            "create",
            "role",
            "r1",
            "-n",
            "team",
            "--verb=get,list",
            "--resource=configmaps",
        ],
    );
    admin(
        &s,
        &[
            "create",
            "role",
            "editor",
            "-n",
            "team",
            "--verb=get,patch,update",
            "--resource=roles",
        ],
    );
    admin(
        &s,
        &[
            "create",
            "rolebinding",
            "a1",
            "-n",
            "team",
            "--role=editor",
            "--user=alice",
        ],
    );
    admin(
        &s,
        &[
            "create",
            "rolebinding",
            "a2",
            "-n",
            "team",
            "--role=r1",
            "--user=alice",
        ],
    );
    let alice = user(&s, dir.path(), "alice", &[]);
    let add_secrets = r#"[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}}]"#;
    for args in [
        vec![
            "patch",
            "role",
            "r1",
            "-n",
            "team",
            "--type=json",
            "-p",
            add_secrets,
        ],
        vec![
            "patch",
            "role",
            "r1",
            "-n",
            "team",
            "--type=merge",
            "-p",
            r#"{"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]}"#,
        ],
    ] {
        let (ok, _, err) = s.kubectl_as(&alice, &args, None).expect("kubectl");
        assert!(!ok, "escalating patch allowed: {args:?}");
        assert!(
            err.contains("is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"),
            "{err}"
        );
    }
    let rules = admin(
        &s,
        &["get", "role", "r1", "-n", "team", "-o", "jsonpath={.rules}"],
    );
    assert!(!rules.contains("secrets"), "nothing stored: {rules}");
    // A patch that grants nothing new goes through.
    let (ok, _, err) = s
        .kubectl_as(
            &alice,
            &["label", "role", "r1", "-n", "team", "reviewed=yes"],
            None,
        )
        .expect("kubectl");
    assert!(ok, "{err}");
}
