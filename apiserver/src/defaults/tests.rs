//! Tests of the whole defaulting pass, object by object, against what kube-apiserver v1.33
//! stores.

use serde_json::{Value, json};

use super::apply;
use crate::registry::catalog;

/// Defaults `obj` as an object of `group/version` `plural` and returns it.
fn defaulted(group: &str, version: &str, plural: &str, obj: Value) -> Value {
    let r = catalog::find(group, version, plural).unwrap();
    let Value::Object(mut map) = obj else {
        panic!("not an object: {obj}");
    };
    apply(r, &mut map);
    Value::Object(map)
}

/// The defaults every container gets, merged over `c`.
fn container_defaults(c: Value, pull: &str) -> Value {
    let Value::Object(mut c) = c else {
        panic!("not an object: {c}");
    };
    c.insert("imagePullPolicy".into(), json!(pull));
    c.insert("resources".into(), json!({}));
    c.insert(
        "terminationMessagePath".into(),
        json!("/dev/termination-log"),
    );
    c.insert("terminationMessagePolicy".into(), json!("File"));
    Value::Object(c)
}

/// A pod spec with one `nginx` container, as a pod template stores it.
fn template_spec_defaults() -> Value {
    json!({
        "containers": [container_defaults(json!({"name": "nginx", "image": "nginx"}), "Always")],
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
    })
}

fn minimal_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
    })
}

#[test]
fn minimal_deployment_gets_exactly_upstreams_defaults() {
    let got = defaulted(
        "apps",
        "v1",
        "deployments",
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": minimal_template(),
            },
        }),
    );
    // `kubectl get deploy web -o yaml` on a v1.33 cluster, less server-owned metadata/status.
    let want = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "progressDeadlineSeconds": 600,
            "replicas": 1,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                "type": "RollingUpdate",
            },
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": template_spec_defaults(),
            },
        },
    });
    assert_eq!(got, want);
}

#[test]
fn image_pull_policy_follows_the_tag() {
    let digest = "nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let cases = [
        ("nginx", "Always"),
        ("nginx:1.27", "IfNotPresent"),
        (digest, "IfNotPresent"),
        ("nginx:latest", "Always"),
    ];
    for (image, want) in cases {
        let pod = defaulted(
            "",
            "v1",
            "pods",
            json!({"spec": {
                "containers": [{"name": "c", "image": image}],
                "initContainers": [{"name": "i", "image": image}],
                "ephemeralContainers": [{"name": "e", "image": image}],
            }}),
        );
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            assert_eq!(
                pod["spec"][list][0]["imagePullPolicy"], want,
                "{image} in {list}"
            );
        }
    }
    // Set by the client: kept.
    let pod = defaulted(
        "",
        "v1",
        "pods",
        json!({"spec": {"containers": [
            {"name": "c", "image": "nginx", "imagePullPolicy": "Never"}
        ]}}),
    );
    assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Never");
}

#[test]
fn pod_gets_pod_only_defaults_and_nested_ones() {
    let pod = defaulted(
        "",
        "v1",
        "pods",
        json!({
            "metadata": {"name": "p"},
            "spec": {
                "hostNetwork": true,
                "containers": [{
                    "name": "c",
                    "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP", "hostPort": 5353}],
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}},
                    "env": [
                        {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "B", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                        {"name": "C", "value": "x"},
                    ],
                    "livenessProbe": {"httpGet": {"port": 80}},
                    "readinessProbe": {"grpc": {"port": 9000}, "periodSeconds": 5, "timeoutSeconds": 0},
                    "startupProbe": {"exec": {"command": ["true"]}, "failureThreshold": 30},
                    "lifecycle": {"preStop": {"httpGet": {"port": 80, "path": "/stop"}}},
                }],
            },
        }),
    );
    let spec = &pod["spec"];
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["restartPolicy"], "Always");
    let c = &spec["containers"][0];
    assert_eq!(
        c["ports"][0],
        json!({"containerPort": 80, "hostPort": 80, "protocol": "TCP"})
    );
    assert_eq!(
        c["ports"][1],
        json!({"containerPort": 53, "hostPort": 5353, "protocol": "UDP"})
    );
    assert_eq!(
        c["resources"],
        json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1Gi"}})
    );
    assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
    assert_eq!(
        c["env"][1]["valueFrom"]["resourceFieldRef"],
        json!({"resource": "limits.cpu", "divisor": "0"})
    );
    assert_eq!(c["env"][2], json!({"name": "C", "value": "x"}));
    assert_eq!(
        c["livenessProbe"],
        json!({
            "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
            "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3,
        })
    );
    assert_eq!(
        c["readinessProbe"],
        json!({
            "grpc": {"port": 9000, "service": ""},
            "timeoutSeconds": 1, "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3,
        })
    );
    assert_eq!(c["startupProbe"]["failureThreshold"], 30);
    assert_eq!(c["startupProbe"]["periodSeconds"], 10);
    assert_eq!(
        c["lifecycle"]["preStop"]["httpGet"],
        json!({"port": 80, "path": "/stop", "scheme": "HTTP"})
    );
}

#[test]
fn pod_template_specs_do_not_get_pod_only_defaults() {
    let rs = defaulted(
        "apps",
        "v1",
        "replicasets",
        json!({"spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "hostNetwork": true,
                    "containers": [{
                        "name": "c", "image": "nginx",
                        "ports": [{"containerPort": 80}],
                        "resources": {"limits": {"cpu": "1"}},
                    }],
                },
            },
        }}),
    );
    let spec = &rs["spec"]["template"]["spec"];
    assert_eq!(rs["spec"]["replicas"], 1);
    assert!(spec.get("enableServiceLinks").is_none());
    assert_eq!(
        spec["containers"][0]["ports"][0],
        json!({"containerPort": 80, "protocol": "TCP"})
    );
    assert_eq!(
        spec["containers"][0]["resources"],
        json!({"limits": {"cpu": "1"}})
    );
}

#[test]
fn volumes() {
    let pod = defaulted(
        "",
        "v1",
        "pods",
        json!({"spec": {"containers": [], "volumes": [
            {"name": "scratch"},
            {"name": "host", "hostPath": {"path": "/data"}},
            {"name": "secret", "secret": {"secretName": "s"}},
            {"name": "cm", "configMap": {"name": "c", "defaultMode": 256}},
            {"name": "down", "downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "proj", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}},
                {"downwardAPI": {"items": [{"path": "c", "resourceFieldRef": {"containerName": "x", "resource": "limits.cpu"}}]}},
            ]}},
            {"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
            {"name": "rbd", "rbd": {"monitors": ["m"], "image": "i"}},
            {"name": "pvc", "persistentVolumeClaim": {"claimName": "data"}},
        ]}}),
    );
    let v = &pod["spec"]["volumes"];
    assert_eq!(v[0], json!({"name": "scratch", "emptyDir": {}}));
    assert_eq!(v[1]["hostPath"], json!({"path": "/data", "type": ""}));
    assert_eq!(
        v[2]["secret"],
        json!({"secretName": "s", "defaultMode": 420})
    );
    assert_eq!(v[3]["configMap"], json!({"name": "c", "defaultMode": 256}));
    assert_eq!(v[4]["downwardAPI"]["defaultMode"], 420);
    assert_eq!(
        v[4]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"],
        "v1"
    );
    assert_eq!(v[5]["projected"]["defaultMode"], 420);
    assert_eq!(
        v[5]["projected"]["sources"][0]["serviceAccountToken"],
        json!({"path": "token", "expirationSeconds": 3600})
    );
    assert_eq!(
        v[5]["projected"]["sources"][1]["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"],
        "0"
    );
    assert_eq!(
        v[6]["ephemeral"]["volumeClaimTemplate"]["spec"],
        json!({"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem", "resources": {}})
    );
    assert_eq!(
        v[7]["rbd"],
        json!({"monitors": ["m"], "image": "i", "pool": "rbd", "user": "admin", "keyring": "/etc/ceph/keyring"})
    );
    assert_eq!(
        v[8],
        json!({"name": "pvc", "persistentVolumeClaim": {"claimName": "data"}})
    );
}

#[test]
fn service_ports_and_policies() {
    let svc = defaulted(
        "",
        "v1",
        "services",
        json!({"metadata": {"name": "s"}, "spec": {
            "selector": {"app": "web"},
            "ports": [{"port": 80}, {"port": 443, "targetPort": "https", "protocol": "TCP"}, {"port": 53, "protocol": "UDP", "targetPort": 0}],
        }}),
    );
    assert_eq!(
        svc["spec"],
        json!({
            "selector": {"app": "web"},
            "ports": [
                {"port": 80, "protocol": "TCP", "targetPort": 80},
                {"port": 443, "protocol": "TCP", "targetPort": "https"},
                {"port": 53, "protocol": "UDP", "targetPort": 53},
            ],
            "sessionAffinity": "None",
            "type": "ClusterIP",
            "internalTrafficPolicy": "Cluster",
        })
    );

    let lb = defaulted(
        "",
        "v1",
        "services",
        json!({
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "sessionAffinity": "ClientIP"},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}, {"hostname": "lb.example"}]}},
        }),
    );
    assert_eq!(lb["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(lb["spec"]["internalTrafficPolicy"], "Cluster");
    assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
    assert_eq!(
        lb["spec"]["sessionAffinityConfig"],
        json!({"clientIP": {"timeoutSeconds": 10800}})
    );
    assert_eq!(lb["status"]["loadBalancer"]["ingress"][0]["ipMode"], "VIP");
    assert!(
        lb["status"]["loadBalancer"]["ingress"][1]
            .get("ipMode")
            .is_none()
    );

    let external = defaulted(
        "",
        "v1",
        "services",
        json!({"spec": {"type": "ExternalName", "externalName": "example.com",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}}}),
    );
    assert_eq!(
        external["spec"],
        json!({"type": "ExternalName", "externalName": "example.com", "sessionAffinity": "None"})
    );

    let node_port = defaulted(
        "",
        "v1",
        "services",
        json!({"spec": {"type": "NodePort", "externalTrafficPolicy": "Local", "ports": [{"port": 80, "nodePort": 30080}]}}),
    );
    assert_eq!(node_port["spec"]["externalTrafficPolicy"], "Local");
    assert!(
        node_port["spec"]
            .get("allocateLoadBalancerNodePorts")
            .is_none()
    );

    let cluster_ip_external = defaulted(
        "",
        "v1",
        "services",
        json!({"spec": {"externalIPs": ["1.2.3.4"], "ports": [{"port": 80}]}}),
    );
    assert_eq!(
        cluster_ip_external["spec"]["externalTrafficPolicy"],
        "Cluster"
    );
}

#[test]
fn job_defaults() {
    let job = defaulted(
        "batch",
        "v1",
        "jobs",
        json!({
            "metadata": {"name": "pi"},
            "spec": {"template": {
                "metadata": {"labels": {"app": "pi"}},
                "spec": {"containers": [{"name": "pi", "image": "perl:5.34.0"}], "restartPolicy": "Never"},
            }},
        }),
    );
    let mut template_spec = template_spec_defaults();
    template_spec["containers"] = json!([container_defaults(
        json!({"name": "pi", "image": "perl:5.34.0"}),
        "IfNotPresent"
    )]);
    template_spec["restartPolicy"] = json!("Never");
    assert_eq!(
        job,
        json!({
            "metadata": {"name": "pi", "labels": {"app": "pi"}},
            "spec": {
                "backoffLimit": 6,
                "completionMode": "NonIndexed",
                "completions": 1,
                "manualSelector": false,
                "parallelism": 1,
                "podReplacementPolicy": "TerminatingOrFailed",
                "suspend": false,
                "template": {"metadata": {"labels": {"app": "pi"}}, "spec": template_spec},
            },
        })
    );

    // No restart policy: upstream defaults it to Always even here (validation then rejects it).
    let job = defaulted(
        "batch",
        "v1",
        "jobs",
        json!({"metadata": {"labels": {"team": "a"}}, "spec": {
            "completions": 5,
            "completionMode": "Indexed",
            "backoffLimitPerIndex": 1,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        }}),
    );
    let spec = &job["spec"];
    assert_eq!(spec["completions"], 5);
    assert_eq!(spec["parallelism"], 1);
    assert_eq!(spec["backoffLimit"], 2_147_483_647);
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["podReplacementPolicy"], "Failed");
    assert_eq!(
        spec["podFailurePolicy"]["rules"][0]["onPodConditions"][0],
        json!({"type": "DisruptionTarget", "status": "True"})
    );
    assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
    assert_eq!(job["metadata"]["labels"], json!({"team": "a"}));

    // Only parallelism set: completions stays unset (a work-queue Job).
    let job = defaulted(
        "batch",
        "v1",
        "jobs",
        json!({"spec": {"parallelism": 3, "backoffLimit": 0, "suspend": true, "template": {}}}),
    );
    assert!(job["spec"].get("completions").is_none());
    assert_eq!(job["spec"]["parallelism"], 3);
    assert_eq!(job["spec"]["backoffLimit"], 0);
    assert_eq!(job["spec"]["suspend"], true);
    assert!(job.get("metadata").is_none());
}

#[test]
fn cron_job_defaults() {
    let cron = defaulted(
        "batch",
        "v1",
        "cronjobs",
        json!({
            "metadata": {"name": "hello"},
            "spec": {
                "schedule": "* * * * *",
                "jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "hello", "image": "busybox:1.28"}],
                    "restartPolicy": "OnFailure",
                }}}},
            },
        }),
    );
    let mut template_spec = template_spec_defaults();
    template_spec["containers"] = json!([container_defaults(
        json!({"name": "hello", "image": "busybox:1.28"}),
        "IfNotPresent"
    )]);
    template_spec["restartPolicy"] = json!("OnFailure");
    assert_eq!(
        cron,
        json!({
            "metadata": {"name": "hello"},
            "spec": {
                "concurrencyPolicy": "Allow",
                "failedJobsHistoryLimit": 1,
                "schedule": "* * * * *",
                "successfulJobsHistoryLimit": 3,
                "suspend": false,
                // No Job-level defaults inside the template.
                "jobTemplate": {"spec": {"template": {"spec": template_spec}}},
            },
        })
    );
}

#[test]
fn stateful_set_daemon_set_replication_controller() {
    let sts = defaulted(
        "apps",
        "v1",
        "statefulsets",
        json!({"spec": {
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "web"}},
            "template": minimal_template(),
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            }}],
        }}),
    );
    let spec = &sts["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(
        spec["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    assert_eq!(spec["template"]["spec"], template_spec_defaults());
    assert_eq!(
        spec["volumeClaimTemplates"][0],
        json!({
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeMode": "Filesystem"},
            "status": {"phase": "Pending"},
        })
    );

    // An explicit RollingUpdate type without rollingUpdate keeps it absent; OnDelete gets none.
    let sts = defaulted(
        "apps",
        "v1",
        "statefulsets",
        json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}}}),
    );
    assert_eq!(
        sts["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate"})
    );

    let ds = defaulted(
        "apps",
        "v1",
        "daemonsets",
        json!({"spec": {"selector": {"matchLabels": {"app": "web"}}, "template": minimal_template()}}),
    );
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
    assert!(ds["spec"].get("replicas").is_none());
    let ds = defaulted(
        "apps",
        "v1",
        "daemonsets",
        json!({"spec": {"updateStrategy": {"type": "OnDelete"}}}),
    );
    assert_eq!(ds["spec"]["updateStrategy"], json!({"type": "OnDelete"}));

    let rc = defaulted(
        "",
        "v1",
        "replicationcontrollers",
        json!({"metadata": {"name": "rc"}, "spec": {"template": minimal_template()}}),
    );
    assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(rc["spec"]["selector"], json!({"app": "web"}));
    assert_eq!(rc["spec"]["replicas"], 1);
    assert_eq!(rc["spec"]["template"]["spec"], template_spec_defaults());

    let pt = defaulted(
        "",
        "v1",
        "podtemplates",
        json!({"metadata": {"name": "t"}, "template": minimal_template()}),
    );
    assert_eq!(pt["template"]["spec"], template_spec_defaults());
}

#[test]
fn other_core_kinds() {
    let pv = defaulted(
        "",
        "v1",
        "persistentvolumes",
        json!({"spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/d"}}}),
    );
    assert_eq!(
        pv,
        json!({
            "spec": {
                "capacity": {"storage": "1Gi"},
                "hostPath": {"path": "/d", "type": ""},
                "persistentVolumeReclaimPolicy": "Retain",
                "volumeMode": "Filesystem",
            },
            "status": {"phase": "Pending"},
        })
    );

    let pvc = defaulted(
        "",
        "v1",
        "persistentvolumeclaims",
        json!({"spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block"}}),
    );
    assert_eq!(
        pvc,
        json!({
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block", "resources": {}},
            "status": {"phase": "Pending"},
        })
    );

    let ns = defaulted(
        "",
        "v1",
        "namespaces",
        json!({"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "other"}}}),
    );
    assert_eq!(
        ns,
        json!({
            "metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "team"}},
            "status": {"phase": "Active"},
        })
    );
    let unnamed = defaulted(
        "",
        "v1",
        "namespaces",
        json!({"metadata": {"generateName": "t-"}}),
    );
    assert!(unnamed["metadata"].get("labels").is_none());

    let node = defaulted(
        "",
        "v1",
        "nodes",
        json!({"metadata": {"name": "n"}, "spec": {}, "status": {"capacity": {"cpu": "4"}}}),
    );
    assert_eq!(
        node,
        json!({
            "metadata": {"name": "n"},
            "spec": {},
            "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}},
        })
    );

    let secret = defaulted("", "v1", "secrets", json!({"metadata": {"name": "s"}}));
    assert_eq!(secret["type"], "Opaque");
    let tls = defaulted("", "v1", "secrets", json!({"type": "kubernetes.io/tls"}));
    assert_eq!(tls["type"], "kubernetes.io/tls");

    let ep = defaulted(
        "",
        "v1",
        "endpoints",
        json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}),
    );
    assert_eq!(
        ep["subsets"][0]["ports"][0],
        json!({"port": 80, "protocol": "TCP"})
    );

    let lr = defaulted(
        "",
        "v1",
        "limitranges",
        json!({"spec": {"limits": [
            {"type": "Container", "max": {"cpu": "2", "memory": "1Gi"}, "min": {"cpu": "100m", "memory": "64Mi"}, "default": {"cpu": "1"}},
            {"type": "Pod", "max": {"cpu": "4"}},
        ]}}),
    );
    assert_eq!(
        lr["spec"]["limits"][0]["default"],
        json!({"cpu": "1", "memory": "1Gi"})
    );
    assert_eq!(
        lr["spec"]["limits"][0]["defaultRequest"],
        json!({"cpu": "1", "memory": "1Gi"})
    );
    assert_eq!(
        lr["spec"]["limits"][1],
        json!({"type": "Pod", "max": {"cpu": "4"}})
    );
    let lr = defaulted(
        "",
        "v1",
        "limitranges",
        json!({"spec": {"limits": [{"type": "Container", "min": {"cpu": "100m"}}]}}),
    );
    assert_eq!(
        lr["spec"]["limits"][0],
        json!({"type": "Container", "min": {"cpu": "100m"}, "defaultRequest": {"cpu": "100m"}})
    );
}

#[test]
fn kinds_without_defaults_are_unchanged() {
    let cases = [
        ("", "v1", "configmaps", json!({"metadata": {"name": "c"}})),
        (
            "",
            "v1",
            "serviceaccounts",
            json!({"metadata": {"name": "sa"}}),
        ),
        (
            "",
            "v1",
            "resourcequotas",
            json!({"spec": {"hard": {"pods": "10"}}}),
        ),
        (
            "apps",
            "v1",
            "controllerrevisions",
            json!({"metadata": {"name": "r"}, "revision": 1}),
        ),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            json!({"rules": []}),
        ),
    ];
    for (group, version, plural, obj) in cases {
        assert_eq!(
            defaulted(group, version, plural, obj.clone()),
            obj,
            "{plural}"
        );
    }
}

/// Objects of every defaulted kind, for the idempotence and no-overwrite tests.
fn samples() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    vec![
        (
            "apps",
            "v1",
            "deployments",
            json!({"spec": {"template": minimal_template()}}),
        ),
        (
            "apps",
            "v1",
            "statefulsets",
            json!({"spec": {"template": minimal_template(), "volumeClaimTemplates": [{"spec": {}}]}}),
        ),
        (
            "apps",
            "v1",
            "daemonsets",
            json!({"spec": {"template": minimal_template()}}),
        ),
        (
            "apps",
            "v1",
            "replicasets",
            json!({"spec": {"template": minimal_template()}}),
        ),
        (
            "",
            "v1",
            "replicationcontrollers",
            json!({"spec": {"template": minimal_template()}}),
        ),
        (
            "",
            "v1",
            "podtemplates",
            json!({"template": minimal_template()}),
        ),
        (
            "",
            "v1",
            "pods",
            json!({"spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}}, "livenessProbe": {"httpGet": {"port": 80}}}], "volumes": [{"name": "v"}]}}),
        ),
        (
            "batch",
            "v1",
            "jobs",
            json!({"spec": {"template": minimal_template()}}),
        ),
        (
            "batch",
            "v1",
            "cronjobs",
            json!({"spec": {"jobTemplate": {"spec": {"template": minimal_template()}}}}),
        ),
        (
            "",
            "v1",
            "services",
            json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 80}]}}),
        ),
        ("", "v1", "namespaces", json!({"metadata": {"name": "n"}})),
        (
            "",
            "v1",
            "nodes",
            json!({"status": {"capacity": {"cpu": "1"}}}),
        ),
        (
            "",
            "v1",
            "persistentvolumes",
            json!({"spec": {"azureDisk": {"diskName": "d", "diskURI": "u"}}}),
        ),
        ("", "v1", "persistentvolumeclaims", json!({"spec": {}})),
        ("", "v1", "secrets", json!({})),
        (
            "",
            "v1",
            "endpoints",
            json!({"subsets": [{"ports": [{"port": 1}]}]}),
        ),
        (
            "",
            "v1",
            "limitranges",
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}),
        ),
    ]
}

#[test]
fn applying_twice_changes_nothing() {
    for (group, version, plural, obj) in samples() {
        let once = defaulted(group, version, plural, obj);
        let twice = defaulted(group, version, plural, once.clone());
        assert_eq!(once, twice, "{plural}");
    }
}

#[test]
fn user_set_values_are_never_overwritten() {
    let deployment = json!({"spec": {
        "replicas": 0,
        "revisionHistoryLimit": 0,
        "progressDeadlineSeconds": 30,
        "strategy": {"type": "Recreate"},
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "dnsPolicy": "Default",
                "restartPolicy": "Always",
                "schedulerName": "mine",
                "securityContext": {"runAsUser": 1000},
                "terminationGracePeriodSeconds": 0,
                "enableServiceLinks": false,
                "containers": [{
                    "name": "c", "image": "nginx", "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/tmp/log", "terminationMessagePolicy": "FallbackToLogsOnError",
                    "resources": {"requests": {"cpu": "1"}},
                    "ports": [{"containerPort": 80, "protocol": "SCTP"}],
                    "readinessProbe": {"tcpSocket": {"port": 80}, "timeoutSeconds": 2, "periodSeconds": 3, "successThreshold": 4, "failureThreshold": 5},
                }],
                "volumes": [{"name": "s", "secret": {"secretName": "x", "defaultMode": 0}}],
            },
        },
    }});
    assert_eq!(
        defaulted("apps", "v1", "deployments", deployment.clone()),
        deployment
    );

    let rolling = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}});
    let got = defaulted("apps", "v1", "deployments", rolling);
    assert_eq!(
        got["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})
    );

    let job = json!({"metadata": {"labels": {"mine": "yes"}}, "spec": {
        "completions": 2, "parallelism": 0, "backoffLimit": 1, "completionMode": "Indexed",
        "suspend": true, "podReplacementPolicy": "Failed", "manualSelector": true,
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"restartPolicy": "Never", "dnsPolicy": "None",
            "schedulerName": "s", "securityContext": {}, "terminationGracePeriodSeconds": 5}},
    }});
    assert_eq!(defaulted("batch", "v1", "jobs", job.clone()), job);

    let cron = json!({"spec": {"concurrencyPolicy": "Forbid", "suspend": true,
        "successfulJobsHistoryLimit": 0, "failedJobsHistoryLimit": 0,
        "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "dnsPolicy": "None",
            "schedulerName": "s", "securityContext": {}, "terminationGracePeriodSeconds": 5}}}}}});
    assert_eq!(defaulted("batch", "v1", "cronjobs", cron.clone()), cron);

    let svc = json!({"spec": {"type": "NodePort", "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
        "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Local",
        "ports": [{"port": 80, "targetPort": 8080, "protocol": "UDP"}]}});
    assert_eq!(defaulted("", "v1", "services", svc.clone()), svc);

    let sts = json!({"spec": {"replicas": 3, "podManagementPolicy": "Parallel", "revisionHistoryLimit": 1,
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
        "template": {"spec": {"restartPolicy": "Always", "dnsPolicy": "None",
            "schedulerName": "s", "securityContext": {}, "terminationGracePeriodSeconds": 5}}}});
    assert_eq!(defaulted("apps", "v1", "statefulsets", sts.clone()), sts);

    let pv = json!({"spec": {"persistentVolumeReclaimPolicy": "Delete", "volumeMode": "Block"}, "status": {"phase": "Bound"}});
    assert_eq!(defaulted("", "v1", "persistentvolumes", pv.clone()), pv);
}

#[test]
fn hpa_v2_gets_min_replicas_and_the_cpu_metric_but_no_behavior() {
    let got = defaulted(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}}),
    );
    assert_eq!(
        got,
        json!({"spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 5,
            "minReplicas": 1,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}],
        }})
    );
}

#[test]
fn hpa_v2_behavior_is_filled_in_rule_by_rule() {
    let got = defaulted(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        json!({"spec": {"maxReplicas": 5, "behavior": {}}}),
    );
    assert_eq!(
        got["spec"]["behavior"],
        json!({
            "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15}]},
            "scaleDown": {"selectPolicy": "Max", "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        })
    );
    let got = defaulted(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        json!({"spec": {"minReplicas": 0, "maxReplicas": 5,
            "metrics": [{"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1"}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60, "policies": []}}}}),
    );
    assert_eq!(got["spec"]["minReplicas"], json!(0));
    assert_eq!(got["spec"]["metrics"][0]["type"], json!("Pods"));
    assert_eq!(
        got["spec"]["behavior"]["scaleDown"],
        json!({"stabilizationWindowSeconds": 60, "policies": [], "selectPolicy": "Max"})
    );
    assert_eq!(
        got["spec"]["behavior"]["scaleUp"]["selectPolicy"],
        json!("Max")
    );
}

#[test]
fn hpa_v1_gets_min_replicas_only() {
    let got = defaulted(
        "autoscaling",
        "v1",
        "horizontalpodautoscalers",
        json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}}),
    );
    assert_eq!(
        got,
        json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5, "minReplicas": 1}})
    );
}

/// One row per built-in type of v1.33: what a minimal object of it reads back as once
/// defaulted (`SetObjectDefaults_<Kind>` of `pkg/apis/<group>/<version>`). Types without
/// defaults come back unchanged.
#[test]
fn defaults_table_one_row_per_type() {
    let spec_defaults = template_spec_defaults();
    let template = minimal_template();
    let defaulted_template = json!({"metadata": {"labels": {"app": "web"}}, "spec": spec_defaults});
    let unchanged = |v: Value| (v.clone(), v);
    #[rustfmt::skip]
    let rows: Vec<(&str, &str, &str, (Value, Value))> = vec![
        // ---- core/v1 ----
        ("", "v1", "pods", (
            json!({"spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}),
            json!({"spec": {
                "containers": [container_defaults(json!({"name": "nginx", "image": "nginx"}), "Always")],
                "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "restartPolicy": "Always",
                "schedulerName": "default-scheduler", "securityContext": {},
                "terminationGracePeriodSeconds": 30}}),
        )),
        ("", "v1", "podtemplates", (
            json!({"template": template}),
            json!({"template": defaulted_template}),
        )),
        ("", "v1", "replicationcontrollers", (
            json!({"spec": {"template": template}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 1,
                "selector": {"app": "web"}, "template": defaulted_template}}),
        )),
        ("", "v1", "services", (
            json!({"spec": {"ports": [{"port": 80}]}}),
            json!({"spec": {"type": "ClusterIP", "sessionAffinity": "None",
                "internalTrafficPolicy": "Cluster",
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]}}),
        )),
        ("", "v1", "namespaces", (
            json!({"metadata": {"name": "n"}}),
            json!({"metadata": {"name": "n", "labels": {"kubernetes.io/metadata.name": "n"}},
                "status": {"phase": "Active"}}),
        )),
        ("", "v1", "nodes", (
            json!({"status": {"capacity": {"cpu": "2"}}}),
            json!({"status": {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "2"}}}),
        )),
        ("", "v1", "persistentvolumes", (
            json!({"spec": {"hostPath": {"path": "/d"}}}),
            json!({"spec": {"hostPath": {"path": "/d", "type": ""},
                "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem"},
                "status": {"phase": "Pending"}}),
        )),
        ("", "v1", "persistentvolumeclaims", (
            json!({"spec": {}}),
            json!({"spec": {"volumeMode": "Filesystem", "resources": {}}, "status": {"phase": "Pending"}}),
        )),
        ("", "v1", "secrets", (json!({}), json!({"type": "Opaque"}))),
        ("", "v1", "endpoints", (
            json!({"subsets": [{"ports": [{"port": 1}]}]}),
            json!({"subsets": [{"ports": [{"port": 1, "protocol": "TCP"}]}]}),
        )),
        ("", "v1", "limitranges", (
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}),
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "1"},
                "default": {"cpu": "1"}, "defaultRequest": {"cpu": "1"}}]}}),
        )),
        ("", "v1", "configmaps", unchanged(json!({"data": {"a": "b"}}))),
        ("", "v1", "serviceaccounts", unchanged(json!({"metadata": {"name": "sa"}}))),
        ("", "v1", "resourcequotas", unchanged(json!({"spec": {"hard": {"pods": "1"}}}))),
        ("", "v1", "events", unchanged(json!({"involvedObject": {"kind": "Pod"}, "message": "m"}))),
        // ---- apps/v1 ----
        ("apps", "v1", "deployments", (
            json!({"spec": {"template": template}}),
            json!({"spec": {"replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "template": defaulted_template}}),
        )),
        ("apps", "v1", "replicasets", (
            json!({"spec": {"template": template}}),
            json!({"spec": {"replicas": 1, "template": defaulted_template}}),
        )),
        ("apps", "v1", "statefulsets", (
            json!({"spec": {"template": template}}),
            json!({"spec": {"replicas": 1, "podManagementPolicy": "OrderedReady", "revisionHistoryLimit": 10,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
                "template": defaulted_template}}),
        )),
        ("apps", "v1", "daemonsets", (
            json!({"spec": {"template": template}}),
            json!({"spec": {"revisionHistoryLimit": 10,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                "template": defaulted_template}}),
        )),
        ("apps", "v1", "controllerrevisions", unchanged(json!({"revision": 1}))),
        // ---- batch/v1 ----
        ("batch", "v1", "jobs", (
            json!({"spec": {"template": template}}),
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"completions": 1, "parallelism": 1,
                "backoffLimit": 6, "completionMode": "NonIndexed", "suspend": false,
                "podReplacementPolicy": "TerminatingOrFailed", "manualSelector": false,
                "template": defaulted_template}}),
        )),
        ("batch", "v1", "cronjobs", (
            json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}),
            json!({"spec": {"schedule": "* * * * *", "concurrencyPolicy": "Allow", "suspend": false,
                "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                "jobTemplate": {"spec": {"template": defaulted_template}}}}),
        )),
        // ---- autoscaling ----
        ("autoscaling", "v2", "horizontalpodautoscalers", (
            json!({"spec": {"maxReplicas": 3, "behavior": {"scaleUp": {"selectPolicy": "Min"}}}}),
            json!({"spec": {"maxReplicas": 3, "minReplicas": 1,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}],
                "behavior": {
                    "scaleUp": {"selectPolicy": "Min", "stabilizationWindowSeconds": 0, "policies": [
                        {"type": "Pods", "value": 4, "periodSeconds": 15},
                        {"type": "Percent", "value": 100, "periodSeconds": 15}]},
                    "scaleDown": {"selectPolicy": "Max", "policies": [
                        {"type": "Percent", "value": 100, "periodSeconds": 15}]}}}}),
        )),
        ("autoscaling", "v1", "horizontalpodautoscalers", (
            json!({"spec": {"maxReplicas": 3}}),
            json!({"spec": {"maxReplicas": 3, "minReplicas": 1}}),
        )),
        // ---- networking.k8s.io/v1, discovery.k8s.io/v1 ----
        ("networking.k8s.io", "v1", "networkpolicies", (
            json!({"spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}}),
            json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                "egress": [{"ports": [{"port": 53, "protocol": "TCP"}]}]}}),
        )),
        ("networking.k8s.io", "v1", "ingressclasses", (
            json!({"spec": {"controller": "x.io/c", "parameters": {"kind": "P", "name": "p"}}}),
            json!({"spec": {"controller": "x.io/c", "parameters": {"kind": "P", "name": "p", "scope": "Cluster"}}}),
        )),
        ("networking.k8s.io", "v1", "ingresses", unchanged(json!({"spec": {"rules": [{"host": "a"}]}}))),
        ("discovery.k8s.io", "v1", "endpointslices", (
            json!({"addressType": "IPv4", "endpoints": [], "ports": [{"port": 80}]}),
            json!({"addressType": "IPv4", "endpoints": [], "ports": [{"port": 80, "name": "", "protocol": "TCP"}]}),
        )),
        // ---- policy/v1 ----
        ("policy", "v1", "poddisruptionbudgets", unchanged(json!({"spec": {"minAvailable": 1}}))),
        // ---- rbac.authorization.k8s.io/v1 ----
        ("rbac.authorization.k8s.io", "v1", "rolebindings", (
            json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [
                {"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "s", "namespace": "n"}]}),
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}, "subjects": [
                {"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"},
                {"kind": "ServiceAccount", "name": "s", "namespace": "n"}]}),
        )),
        ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", (
            json!({"roleRef": {"kind": "ClusterRole", "name": "r"}, "subjects": [{"kind": "Group", "name": "g"}]}),
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
                "subjects": [{"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"}]}),
        )),
        ("rbac.authorization.k8s.io", "v1", "clusterroles", unchanged(json!({"rules": []}))),
        // ---- storage.k8s.io/v1 ----
        ("storage.k8s.io", "v1", "storageclasses", (
            json!({"provisioner": "x.io/p"}),
            json!({"provisioner": "x.io/p", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}),
        )),
        ("storage.k8s.io", "v1", "csidrivers", (
            json!({"spec": {}}),
            json!({"spec": {"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
                "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"],
                "requiresRepublish": false, "seLinuxMount": false}}),
        )),
        ("storage.k8s.io", "v1", "csinodes", unchanged(json!({"spec": {"drivers": []}}))),
        // ---- scheduling, coordination, certificates, node ----
        ("scheduling.k8s.io", "v1", "priorityclasses", (
            json!({"value": 10}),
            json!({"value": 10, "preemptionPolicy": "PreemptLowerPriority"}),
        )),
        ("coordination.k8s.io", "v1", "leases", unchanged(json!({"spec": {"holderIdentity": "h"}}))),
        ("certificates.k8s.io", "v1", "certificatesigningrequests",
            unchanged(json!({"spec": {"request": "", "signerName": "x.io/s"}}))),
        ("node.k8s.io", "v1", "runtimeclasses", unchanged(json!({"handler": "runc"}))),
        // ---- admissionregistration.k8s.io/v1 ----
        ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", (
            json!({"webhooks": [{"name": "w.x.io", "clientConfig": {"service": {"namespace": "n", "name": "s"}},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}),
            json!({"webhooks": [{"name": "w.x.io", "clientConfig": {"service": {"namespace": "n", "name": "s", "port": 443}},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {},
                "objectSelector": {}, "timeoutSeconds": 10}]}),
        )),
        ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", (
            json!({"webhooks": [{"name": "w.x.io", "clientConfig": {"url": "https://x"}}]}),
            json!({"webhooks": [{"name": "w.x.io", "clientConfig": {"url": "https://x"},
                "failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {},
                "objectSelector": {}, "timeoutSeconds": 10, "reinvocationPolicy": "Never"}]}),
        )),
        ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", (
            json!({"spec": {"matchConstraints": {"resourceRules": [{"operations": ["*"], "apiGroups": ["*"],
                "apiVersions": ["*"], "resources": ["*"]}]}, "validations": [{"expression": "true"}]}}),
            json!({"spec": {"failurePolicy": "Fail", "matchConstraints": {"matchPolicy": "Equivalent",
                "namespaceSelector": {}, "objectSelector": {}, "resourceRules": [{"operations": ["*"],
                "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "*"}]},
                "validations": [{"expression": "true"}]}}),
        )),
        ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", (
            json!({"spec": {"policyName": "p", "validationActions": ["Deny"], "matchResources": {}}}),
            json!({"spec": {"policyName": "p", "validationActions": ["Deny"], "matchResources": {
                "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}}}}),
        )),
        // ---- flowcontrol.apiserver.k8s.io/v1 ----
        ("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", (
            json!({"spec": {"priorityLevelConfiguration": {"name": "p"}}}),
            json!({"spec": {"priorityLevelConfiguration": {"name": "p"}, "matchingPrecedence": 1000}}),
        )),
        ("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", (
            json!({"spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {}}}}}),
            json!({"spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 30, "lendablePercent": 0,
                "limitResponse": {"type": "Queue", "queuing": {"handSize": 8, "queues": 64, "queueLengthLimit": 50}}}}}),
        )),
        // ---- apiregistration.k8s.io/v1, apiextensions.k8s.io/v1 ----
        ("apiregistration.k8s.io", "v1", "apiservices", (
            json!({"spec": {"group": "g", "version": "v1", "service": {"namespace": "n", "name": "s"}}}),
            json!({"spec": {"group": "g", "version": "v1", "service": {"namespace": "n", "name": "s", "port": 443}}}),
        )),
        ("apiextensions.k8s.io", "v1", "customresourcedefinitions", (
            json!({"spec": {"group": "x.io", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true}]}}),
            json!({"spec": {"group": "x.io", "names": {"kind": "Widget", "plural": "widgets", "singular": "widget",
                "listKind": "WidgetList"}, "scope": "Namespaced", "conversion": {"strategy": "None"},
                "versions": [{"name": "v1", "served": true, "storage": true}]},
                "status": {"storedVersions": ["v1"]}}),
        )),
    ];
    for (group, version, plural, (input, expected)) in rows {
        let got = defaulted(group, version, plural, input);
        assert_eq!(got, expected, "{group}/{version} {plural}");
        assert_eq!(
            defaulted(group, version, plural, got.clone()),
            got,
            "{group}/{version} {plural}: idempotent"
        );
    }
}
