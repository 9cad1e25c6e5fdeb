use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::*;
use crate::registry::catalog::{BUILTIN, ResourceInfo};

/// The fixed "now" of these tests.
const NOW: &str = "2026-11-22T05:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap_or_else(|e| panic!("{e}"))
}

/// `NOW` minus `secs` seconds, as an RFC 3339 string.
fn ago(secs: i64) -> String {
    let t = Timestamp::from_second(now().as_second() - secs).unwrap_or_else(|e| panic!("{e}"));
    t.to_string()
}

fn resource(group: &str, plural: &str) -> &'static ResourceInfo {
    BUILTIN
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .unwrap_or_else(|| panic!("no {plural}.{group}"))
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn table(group: &str, plural: &str, objects: Vec<Value>) -> Value {
    let objects: Vec<_> = objects.into_iter().map(obj).collect();
    table_at(
        resource(group, plural),
        &objects,
        json!({"resourceVersion": "7"}),
        IncludeObject::Metadata,
        now(),
    )
}

/// The cells of the only row.
fn cells_of(t: &Value) -> Vec<Value> {
    let rows = t["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "{t}");
    rows[0]["cells"].as_array().cloned().unwrap_or_default()
}

fn column_names(t: &Value) -> Vec<String> {
    t["columnDefinitions"]
        .as_array()
        .map(|cols| {
            cols.iter()
                .map(|c| c["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn pod(status: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "default", "creationTimestamp": ago(300), "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "busybox"}], "nodeName": "node-1"},
    });
    p["status"] = status;
    p
}

/// READY, STATUS, RESTARTS of a pod.
fn pod_summary(p: Value) -> (String, String, String) {
    let t = table("", "pods", vec![p]);
    let c = cells_of(&t);
    let s = |i: usize| c[i].as_str().unwrap_or("").to_owned();
    (s(1), s(2), s(3))
}

fn running(ready: bool) -> Value {
    json!({"name": "x", "ready": ready, "restartCount": 0, "state": {"running": {"startedAt": ago(200)}}})
}

#[test]
fn human_duration_boundaries() {
    let s = 1_000_000_000i64;
    let cases: &[(i64, &str)] = &[
        (-3 * s, "<invalid>"),
        (-2 * s, "<invalid>"),
        (-s - s / 2, "0s"),
        (-s, "0s"),
        (0, "0s"),
        (s / 2, "0s"),
        (5 * s, "5s"),
        (119 * s, "119s"),
        (120 * s, "2m"),
        (121 * s, "2m1s"),
        (182 * s, "3m2s"),
        (599 * s, "9m59s"),
        (600 * s, "10m"),
        (659 * s, "10m"),
        (179 * 60 * s, "179m"),
        (180 * 60 * s, "3h"),
        (3 * 3600 * s + 60 * s, "3h1m"),
        (8 * 3600 * s - s, "7h59m"),
        (8 * 3600 * s, "8h"),
        (47 * 3600 * s + 59 * 60 * s, "47h"),
        (48 * 3600 * s, "2d"),
        (52 * 3600 * s, "2d4h"),
        (8 * 24 * 3600 * s - s, "7d23h"),
        (8 * 24 * 3600 * s, "8d"),
        (400 * 24 * 3600 * s, "400d"),
        (2 * 365 * 24 * 3600 * s - s, "729d"),
        (2 * 365 * 24 * 3600 * s, "2y"),
        ((3 * 365 + 20) * 24 * 3600 * s, "3y20d"),
        (8 * 365 * 24 * 3600 * s, "8y"),
        ((9 * 365 + 100) * 24 * 3600 * s, "9y"),
    ];
    for (nanos, want) in cases {
        assert_eq!(human_duration(*nanos), *want, "{nanos}ns");
    }
}

#[test]
fn table_shape_and_partial_object_metadata() {
    let t = table("", "pods", vec![pod(json!({"phase": "Running"}))]);
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(t["metadata"], json!({"resourceVersion": "7"}));
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    let cols = t["columnDefinitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(cols[0]["format"], "name");
    assert_eq!(cols[0]["type"], "string");
    assert_eq!(cols[1]["format"], "");
    assert_eq!(cols[4]["priority"], 0);
    assert_eq!(cols[5]["priority"], 1);
    assert!(
        cols[0]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Name must be unique within a namespace."))
    );
    for c in &cols {
        for key in ["name", "type", "format", "description", "priority"] {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
    }
    let row = &t["rows"][0];
    assert_eq!(
        row["object"],
        json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": "web-1", "namespace": "default", "creationTimestamp": ago(300), "labels": {"app": "web"}},
        })
    );
    assert!(row.get("conditions").is_none());
    let cells = cells_of(&t);
    assert_eq!(cells.len(), cols.len());
    assert_eq!(
        cells,
        vec![
            json!("web-1"),
            json!("0/2"),
            json!("Running"),
            json!("0"),
            json!("5m"),
            json!("<none>"),
            json!("node-1"),
            json!("<none>"),
            json!("<none>"),
        ]
    );
}

#[test]
fn include_object_variants() {
    assert_eq!(IncludeObject::from_query(None), IncludeObject::Metadata);
    assert_eq!(
        IncludeObject::from_query(Some("Metadata")),
        IncludeObject::Metadata
    );
    assert_eq!(IncludeObject::from_query(Some("None")), IncludeObject::None);
    assert_eq!(
        IncludeObject::from_query(Some("Object")),
        IncludeObject::Object
    );
    assert_eq!(
        IncludeObject::from_query(Some("bogus")),
        IncludeObject::Metadata
    );

    let p = obj(pod(json!({"phase": "Pending"})));
    let r = resource("", "pods");
    let with = |include| table_at(r, std::slice::from_ref(&p), json!({}), include, now());
    assert_eq!(with(IncludeObject::None)["rows"][0]["object"], Value::Null);
    assert_eq!(
        with(IncludeObject::Object)["rows"][0]["object"],
        Value::Object(p.clone())
    );
    assert_eq!(
        with(IncludeObject::Metadata)["rows"][0]["object"]["kind"],
        "PartialObjectMetadata"
    );
    // The public entry point measures against the real clock.
    let t = to_table(
        r,
        std::slice::from_ref(&p),
        Value::Null,
        IncludeObject::None,
    );
    assert_eq!(t["metadata"], json!({}));
    assert_eq!(t["rows"][0]["cells"][0], "web-1");
}

#[test]
fn list_metadata_is_copied() {
    let meta = json!({"resourceVersion": "42", "continue": "abc", "remainingItemCount": 3});
    let t = table_at(
        resource("", "configmaps"),
        &[],
        meta.clone(),
        IncludeObject::Metadata,
        now(),
    );
    assert_eq!(t["metadata"], meta);
    assert_eq!(t["rows"], json!([]));
}

#[test]
fn wants_table_accept_headers() {
    let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    assert!(wants_table(kubectl));
    assert!(wants_table(
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
    ));
    assert!(wants_table(
        "application/json; as=Table; v=v1; g=meta.k8s.io"
    ));
    assert!(!wants_table("application/json"));
    assert!(!wants_table(""));
    assert!(!wants_table("*/*"));
    assert!(!wants_table(
        "application/vnd.kubernetes.protobuf,application/json"
    ));
    // The client's first preference wins.
    assert!(!wants_table(
        "application/json,application/json;as=Table;v=v1;g=meta.k8s.io"
    ));
    // Wrong group or version is not a Table request.
    assert!(!wants_table("application/json;as=Table;v=v2;g=meta.k8s.io"));
    assert!(!wants_table("application/json;as=Table;v=v1;g=apps"));
    // A protobuf Table is not served here; the JSON Table after it is.
    assert!(wants_table(
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    ));
    // q-values order the clauses.
    assert!(wants_table(
        "application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io"
    ));
    assert!(!wants_table(
        "application/json;as=Table;v=v1;g=meta.k8s.io;q=0,application/json"
    ));
    assert_eq!(
        TABLE_CONTENT_TYPE,
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    );
}

#[test]
fn pod_status_running_and_ready() {
    let p = pod(json!({
        "phase": "Running",
        "podIP": "10.0.0.5",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [running(true), running(true)],
    }));
    assert_eq!(pod_summary(p), ("2/2".into(), "Running".into(), "0".into()));
}

#[test]
fn pod_status_pending_and_waiting() {
    assert_eq!(
        pod_summary(pod(json!({"phase": "Pending"}))),
        ("0/2".into(), "Pending".into(), "0".into())
    );
    let p = pod(json!({
        "phase": "Pending",
        "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}},
            {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}},
        ],
    }));
    assert_eq!(pod_summary(p).1, "ContainerCreating");
    // The first container's reason wins (statuses are walked backwards).
    let p = pod(json!({
        "phase": "Running",
        "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(150)}}},
            running(true),
        ],
    }));
    assert_eq!(
        pod_summary(p),
        (
            "1/2".into(),
            "CrashLoopBackOff".into(),
            "4 (2m30s ago)".into()
        )
    );
    let p = pod(json!({
        "phase": "Pending",
        "containerStatuses": [{"name": "a", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}],
    }));
    assert_eq!(pod_summary(p).1, "ImagePullBackOff");
}

#[test]
fn pod_status_terminated_containers() {
    let done = |code: i64, reason: Option<&str>, signal: i64| {
        let mut t = json!({"exitCode": code, "signal": signal});
        if let Some(r) = reason {
            t["reason"] = json!(r);
        }
        json!({"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": t}})
    };
    let p =
        pod(json!({"phase": "Succeeded", "containerStatuses": [done(0, Some("Completed"), 0)]}));
    let t = table("", "pods", vec![p]);
    assert_eq!(cells_of(&t)[2], "Completed");
    assert_eq!(
        t["rows"][0]["conditions"],
        json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}])
    );
    let p = pod(json!({"phase": "Failed", "containerStatuses": [done(137, Some("OOMKilled"), 0)]}));
    let t = table("", "pods", vec![p]);
    assert_eq!(cells_of(&t)[2], "OOMKilled");
    assert_eq!(t["rows"][0]["conditions"][0]["reason"], "Failed");
    assert_eq!(
        pod_summary(pod(
            json!({"phase": "Failed", "containerStatuses": [done(3, None, 0)]})
        ))
        .1,
        "ExitCode:3"
    );
    assert_eq!(
        pod_summary(pod(
            json!({"phase": "Failed", "containerStatuses": [done(0, None, 9)]})
        ))
        .1,
        "Signal:9"
    );
    // A completed container next to a running one: Running when the pod is Ready.
    let p = pod(json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [done(0, Some("Completed"), 0), running(true)],
    }));
    assert_eq!(pod_summary(p).1, "Running");
    let p = pod(json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [done(0, Some("Completed"), 0), running(true)],
    }));
    assert_eq!(
        pod_summary(p),
        ("1/2".into(), "NotReady".into(), "0".into())
    );
}

#[test]
fn pod_status_init_containers() {
    let with_init = |statuses: Value, conditions: Value| {
        let mut p = pod(json!({
            "phase": "Pending",
            "initContainerStatuses": statuses,
            "conditions": conditions,
            "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}},
            ],
        }));
        p["spec"]["initContainers"] =
            json!([{"name": "i1", "image": "x"}, {"name": "i2", "image": "y"}]);
        p
    };
    let done = json!({"name": "i1", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}});
    let running_init =
        json!({"name": "i2", "ready": false, "restartCount": 0, "state": {"running": {}}});
    let waiting_init = json!({"name": "i1", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}});
    assert_eq!(
        pod_summary(with_init(json!([done, running_init]), json!([]))).1,
        "Init:1/2"
    );
    assert_eq!(
        pod_summary(with_init(json!([waiting_init]), json!([]))).1,
        "Init:0/2"
    );
    let crash = json!({"name": "i1", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(30)}}});
    // Restarts of init containers count while initializing.
    assert_eq!(
        pod_summary(with_init(json!([crash]), json!([]))),
        (
            "0/2".into(),
            "Init:CrashLoopBackOff".into(),
            "3 (30s ago)".into()
        )
    );
    let failed = json!({"name": "i1", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}});
    assert_eq!(
        pod_summary(with_init(json!([failed]), json!([]))).1,
        "Init:ExitCode:2"
    );
    let oom = json!({"name": "i1", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}});
    assert_eq!(
        pod_summary(with_init(json!([oom]), json!([]))).1,
        "Init:OOMKilled"
    );
    // All init containers done: the main containers decide.
    let done2 = json!({"name": "i2", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}});
    assert_eq!(
        pod_summary(with_init(json!([done, done2]), json!([]))).1,
        "PodInitializing"
    );
}

#[test]
fn pod_with_sidecar_counts_it() {
    let mut p = pod(json!({
        "phase": "Running",
        "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
        "initContainerStatuses": [
            {"name": "proxy", "ready": true, "started": true, "restartCount": 1, "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(4000)}}},
        ],
        "containerStatuses": [running(true), running(true)],
    }));
    p["spec"]["initContainers"] =
        json!([{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}]);
    assert_eq!(
        pod_summary(p),
        ("3/3".into(), "Running".into(), "1 (66m ago)".into())
    );
}

#[test]
fn pod_terminating_and_special_reasons() {
    let mut p =
        pod(json!({"phase": "Running", "containerStatuses": [running(true), running(true)]}));
    p["metadata"]["deletionTimestamp"] = json!(ago(1));
    assert_eq!(pod_summary(p.clone()).1, "Terminating");
    p["status"]["reason"] = json!("NodeLost");
    assert_eq!(pod_summary(p.clone()).1, "Unknown");
    let mut done = pod(json!({"phase": "Succeeded"}));
    done["metadata"]["deletionTimestamp"] = json!(ago(1));
    assert_eq!(pod_summary(done).1, "Succeeded");
    assert_eq!(
        pod_summary(pod(json!({"phase": "Failed", "reason": "Evicted"}))).1,
        "Evicted"
    );
    let gated = pod(
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
    );
    assert_eq!(pod_summary(gated).1, "SchedulingGated");
}

#[test]
fn pod_wide_cells() {
    let mut p = pod(json!({
        "phase": "Running",
        "podIPs": [{"ip": "10.1.2.3"}, {"ip": "fd00::3"}],
        "nominatedNodeName": "node-2",
        "conditions": [{"type": "example.com/gate", "status": "True"}, {"type": "other", "status": "False"}],
    }));
    p["spec"]["readinessGates"] =
        json!([{"conditionType": "example.com/gate"}, {"conditionType": "other"}]);
    let c = cells_of(&table("", "pods", vec![p]));
    assert_eq!(
        c[5..].to_vec(),
        vec![
            json!("10.1.2.3"),
            json!("node-1"),
            json!("node-2"),
            json!("1/2")
        ]
    );
}

#[test]
fn deployment_row() {
    let d = json!({
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(3 * 86400 + 5 * 3600)},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web", "tier": "front"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]},
            "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}, {"name": "log", "image": "fluentd"}]}},
        },
        "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    });
    let t = table("apps", "deployments", vec![d]);
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "Ready",
            "Up-to-date",
            "Available",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(
        cells_of(&t),
        vec![
            json!("web"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("3d5h"),
            json!("nginx,log"),
            json!("nginx:1.27,fluentd"),
            json!("app=web,env in (dev,prod),tier=front"),
        ]
    );
}

#[test]
fn service_rows() {
    let svc = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(45)},
        "spec": {
            "type": "NodePort",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "nodePort": 30443, "protocol": "TCP"}],
            "selector": {"app": "web"},
        },
    });
    let t = table("", "services", vec![svc]);
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "Type",
            "Cluster-IP",
            "External-IP",
            "Port(s)",
            "Age",
            "Selector"
        ]
    );
    assert_eq!(
        cells_of(&t),
        vec![
            json!("web"),
            json!("NodePort"),
            json!("10.96.0.10"),
            json!("<none>"),
            json!("80/TCP,443:30443/TCP"),
            json!("45s"),
            json!("app=web"),
        ]
    );
    let lb = json!({
        "metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.11"], "ports": []},
    });
    let c = cells_of(&table("", "services", vec![lb.clone()]));
    assert_eq!(c[3], "<pending>");
    assert_eq!(c[4], "<none>");
    assert_eq!(c[5], "<unknown>");
    assert_eq!(c[6], "<none>");
    let mut lb2 = lb;
    lb2["status"] =
        json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.9"}, {"hostname": "a.example"}]}});
    lb2["spec"]["externalIPs"] = json!(["198.51.100.1"]);
    assert_eq!(
        cells_of(&table("", "services", vec![lb2]))[3],
        "192.0.2.9,a.example,198.51.100.1"
    );
    let headless =
        json!({"metadata": {"name": "h"}, "spec": {"type": "ClusterIP", "clusterIP": "None"}});
    assert_eq!(cells_of(&table("", "services", vec![headless]))[2], "None");
}

#[test]
fn default_table_for_kinds_without_a_printer() {
    for (group, plural) in [
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("", "limitranges"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ] {
        let o = json!({"metadata": {"name": "x", "creationTimestamp": "2026-11-20T01:02:03.456Z"}});
        let t = table(group, plural, vec![o]);
        assert_eq!(column_names(&t), ["Name", "Created At"], "{plural}");
        let cols = &t["columnDefinitions"];
        assert_eq!(cols[0]["format"], "name");
        assert_eq!(cols[1]["type"], "date");
        assert_eq!(cols[1]["format"], "");
        assert_eq!(
            cells_of(&t),
            vec![json!("x"), json!("2026-11-20T01:02:03Z")]
        );
    }
    let t = table("", "limitranges", vec![json!({"metadata": {"name": "y"}})]);
    assert_eq!(cells_of(&t)[1], "0001-01-01T00:00:00Z");
}

#[test]
fn node_row() {
    let n = json!({
        "metadata": {"name": "node-1", "creationTimestamp": ago(7200),
            "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/worker": "", "kubernetes.io/role": "infra"}},
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}, {"type": "Hostname", "address": "node-1"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian GNU/Linux 13", "kernelVersion": "6.12.0", "containerRuntimeVersion": ""},
        },
    });
    assert_eq!(
        cells_of(&table("", "nodes", vec![n])),
        vec![
            json!("node-1"),
            json!("Ready,SchedulingDisabled"),
            json!("control-plane,infra,worker"),
            json!("120m"),
            json!("v1.33.0"),
            json!("192.168.1.10"),
            json!("<none>"),
            json!("Debian GNU/Linux 13"),
            json!("6.12.0"),
            json!("<unknown>"),
        ]
    );
}

#[test]
fn simple_core_rows() {
    let ns = json!({"metadata": {"name": "default", "creationTimestamp": ago(10)}, "status": {"phase": "Active"}});
    assert_eq!(
        cells_of(&table("", "namespaces", vec![ns])),
        vec![json!("default"), json!("Active"), json!("10s")]
    );
    let secret = json!({"metadata": {"name": "s", "creationTimestamp": ago(10)}, "type": "Opaque", "data": {"a": "eA==", "b": "eQ=="}});
    assert_eq!(
        cells_of(&table("", "secrets", vec![secret])),
        vec![json!("s"), json!("Opaque"), json!(2), json!("10s")]
    );
    let cm = json!({"metadata": {"name": "c", "creationTimestamp": ago(10)}, "data": {"a": "1"}, "binaryData": {"b": "eA=="}});
    assert_eq!(
        cells_of(&table("", "configmaps", vec![cm])),
        vec![json!("c"), json!(2), json!("10s")]
    );
    let sa = json!({"metadata": {"name": "default", "creationTimestamp": ago(10)}});
    assert_eq!(
        cells_of(&table("", "serviceaccounts", vec![sa])),
        vec![json!("default"), json!(0), json!("10s")]
    );
    let lease = json!({"metadata": {"name": "l", "creationTimestamp": ago(10)}, "spec": {"holderIdentity": "node-1"}});
    let t = table("coordination.k8s.io", "leases", vec![lease]);
    assert_eq!(column_names(&t), ["Name", "Holder", "Age"]);
    assert_eq!(
        cells_of(&t),
        vec![json!("l"), json!("node-1"), json!("10s")]
    );
}

#[test]
fn event_rows() {
    let e = json!({
        "metadata": {"name": "web-1.17a", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web-1", "fieldPath": "spec.containers{a}"},
        "reason": "Pulled", "type": "Normal", "message": "  Container image pulled \n",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": ago(600), "lastTimestamp": ago(61), "count": 3,
    });
    let t = table("", "events", vec![e]);
    assert_eq!(
        column_names(&t),
        [
            "Last Seen",
            "Type",
            "Reason",
            "Object",
            "Subobject",
            "Source",
            "Message",
            "First Seen",
            "Count",
            "Name"
        ]
    );
    assert_eq!(t["columnDefinitions"][9]["format"], "name");
    assert_eq!(t["columnDefinitions"][9]["priority"], 1);
    assert_eq!(
        cells_of(&t),
        vec![
            json!("61s"),
            json!("Normal"),
            json!("Pulled"),
            json!("pod/web-1"),
            json!("spec.containers{a}"),
            json!("kubelet, node-1"),
            json!("Container image pulled"),
            json!("10m"),
            json!(3),
            json!("web-1.17a"),
        ]
    );
    // The new API: eventTime only, reporting controller, no count.
    let e = json!({
        "metadata": {"name": "x"},
        "regarding": {"kind": "Node", "name": "node-1"},
        "reason": "Starting", "type": "Normal", "note": "started",
        "eventTime": "2026-11-22T04:59:30.123456Z", "reportingController": "kubelet",
    });
    let c = cells_of(&table("events.k8s.io", "events", vec![e]));
    assert_eq!(c[0], "29s");
    assert_eq!(c[3], "node/node-1");
    assert_eq!(c[5], "kubelet");
    assert_eq!(c[6], "started");
    assert_eq!(c[7], "29s");
    assert_eq!(c[8], 1);
}

#[test]
fn workload_rows() {
    let rs = json!({"metadata": {"name": "web-abc", "creationTimestamp": ago(60)},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"replicas": 2, "readyReplicas": 1}});
    assert_eq!(
        cells_of(&table("apps", "replicasets", vec![rs])),
        vec![
            json!("web-abc"),
            json!(2),
            json!(2),
            json!(1),
            json!("60s"),
            json!("c"),
            json!("i"),
            json!("app=web")
        ]
    );
    let sts = json!({"metadata": {"name": "db"}, "spec": {"replicas": 3, "template": {"spec": {"containers": []}}}, "status": {"readyReplicas": 3}});
    assert_eq!(
        cells_of(&table("apps", "statefulsets", vec![sts]))[1],
        "3/3"
    );
    let ds = json!({"metadata": {"name": "agent"},
        "spec": {"selector": {}, "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": [{"name": "a", "image": "b"}]}}},
        "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 3, "numberAvailable": 2}});
    let c = cells_of(&table("apps", "daemonsets", vec![ds]));
    assert_eq!(
        c[1..7].to_vec(),
        vec![
            json!(3),
            json!(3),
            json!(2),
            json!(3),
            json!(2),
            json!("kubernetes.io/os=linux")
        ]
    );
    assert_eq!(c[10], "<none>");
    let cr = json!({"metadata": {"name": "web-5d4", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "controller": true}]}, "revision": 4});
    let c = cells_of(&table("apps", "controllerrevisions", vec![cr]));
    assert_eq!(c[1], "statefulset.apps/db");
    assert_eq!(c[2], 4);
}

#[test]
fn job_and_cronjob_rows() {
    let job = json!({
        "metadata": {"name": "pi", "creationTimestamp": ago(300)},
        "spec": {"completions": 1, "parallelism": 1, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
            "template": {"spec": {"containers": [{"name": "pi", "image": "perl"}]}}},
        "status": {"succeeded": 1, "startTime": ago(300), "completionTime": ago(250),
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]},
    });
    let t = table("batch", "jobs", vec![job]);
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "Status",
            "Completions",
            "Duration",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(
        cells_of(&t),
        vec![
            json!("pi"),
            json!("Complete"),
            json!("1/1"),
            json!("50s"),
            json!("5m"),
            json!("pi"),
            json!("perl"),
            json!("batch.kubernetes.io/controller-uid=u"),
        ]
    );
    let running = json!({"metadata": {"name": "w"}, "spec": {"parallelism": 3}, "status": {"startTime": ago(30)}});
    let c = cells_of(&table("batch", "jobs", vec![running]));
    assert_eq!(
        c[1..4].to_vec(),
        vec![json!("Running"), json!("0/1 of 3"), json!("30s")]
    );
    let cj = json!({"metadata": {"name": "hourly", "creationTimestamp": ago(7200)},
        "spec": {"schedule": "0 * * * *", "suspend": false, "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}},
        "status": {"active": [{"name": "hourly-1"}], "lastScheduleTime": ago(600)}});
    assert_eq!(
        cells_of(&table("batch", "cronjobs", vec![cj])),
        vec![
            json!("hourly"),
            json!("0 * * * *"),
            json!("<none>"),
            json!("False"),
            json!(1),
            json!("10m"),
            json!("120m"),
            json!("c"),
            json!("i"),
            json!("<none>"),
        ]
    );
}

#[test]
fn networking_and_storage_rows() {
    let ing = json!({"metadata": {"name": "i"}, "spec": {"ingressClassName": "nginx",
        "rules": [{"host": "a.example"}, {"host": "b.example"}, {}, {"host": "c.example"}, {"host": "d.example"}],
        "tls": [{"hosts": ["a.example"]}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}});
    let c = cells_of(&table("networking.k8s.io", "ingresses", vec![ing]));
    assert_eq!(
        c[1..5].to_vec(),
        vec![
            json!("nginx"),
            json!("a.example,b.example,c.example + 2 more..."),
            json!("192.0.2.1"),
            json!("80, 443")
        ]
    );
    let ep = json!({"metadata": {"name": "web"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}, {"port": 8080}]}]});
    assert_eq!(
        cells_of(&table("", "endpoints", vec![ep]))[1],
        "10.0.0.1:80,10.0.0.2:80,10.0.0.1:8080 + 1 more..."
    );
    let eps = json!({"metadata": {"name": "web-x"}, "addressType": "IPv4", "ports": [{"port": 80, "name": "http"}], "endpoints": []});
    let c = cells_of(&table("discovery.k8s.io", "endpointslices", vec![eps]));
    assert_eq!(
        c[1..4].to_vec(),
        vec![json!("IPv4"), json!("80"), json!("<unset>")]
    );
    let sc = json!({"metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "rancher.io/local-path"});
    let c = cells_of(&table("storage.k8s.io", "storageclasses", vec![sc]));
    assert_eq!(
        c[..5].to_vec(),
        vec![
            json!("standard (default)"),
            json!("rancher.io/local-path"),
            json!("Delete"),
            json!("Immediate"),
            json!(false)
        ]
    );
    let pvc = json!({"metadata": {"name": "data"}, "spec": {"volumeName": "pv-1", "storageClassName": "standard"},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"]}});
    let c = cells_of(&table("", "persistentvolumeclaims", vec![pvc]));
    assert_eq!(
        c[1..7].to_vec(),
        vec![
            json!("Bound"),
            json!("pv-1"),
            json!("1Gi"),
            json!("RWO,RWX"),
            json!("standard"),
            json!("<unset>")
        ]
    );
    let quota = json!({"metadata": {"name": "q"}, "status": {"hard": {"pods": "10", "limits.cpu": "2", "requests.cpu": "1"}, "used": {"pods": "3", "requests.cpu": "500m"}}});
    let c = cells_of(&table("", "resourcequotas", vec![quota]));
    assert_eq!(c[1], "pods: 3/10, requests.cpu: 500m/1");
    assert_eq!(c[2], "limits.cpu: 0/2");
}

#[test]
fn cluster_rows() {
    let hpa = json!({"metadata": {"name": "web"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 5,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}]},
        "status": {"currentReplicas": 2, "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 35, "averageValue": "70m"}}}]}});
    let c = cells_of(&table("autoscaling", "horizontalpodautoscalers", vec![hpa]));
    assert_eq!(
        c[1..6].to_vec(),
        vec![
            json!("Deployment/web"),
            json!("cpu: 35%/80%, memory: <unknown>/100Mi + 1 more..."),
            json!("1"),
            json!(5),
            json!(2)
        ]
    );
    let rb = json!({"metadata": {"name": "rb"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"}, {"kind": "ServiceAccount", "name": "ci", "namespace": "build"}, {"kind": "User", "name": "bob"}]});
    let c = cells_of(&table(
        "rbac.authorization.k8s.io",
        "rolebindings",
        vec![rb],
    ));
    assert_eq!(
        c,
        vec![
            json!("rb"),
            json!("ClusterRole/view"),
            json!("<unknown>"),
            json!("alice, bob"),
            json!("devs"),
            json!("build/ci")
        ]
    );
    let csr = json!({"metadata": {"name": "csr-1"}, "spec": {"signerName": "kubernetes.io/kube-apiserver-client", "username": "alice", "expirationSeconds": 86400},
        "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "LS0t"}});
    let c = cells_of(&table(
        "certificates.k8s.io",
        "certificatesigningrequests",
        vec![csr],
    ));
    assert_eq!(
        c[2..].to_vec(),
        vec![
            json!("kubernetes.io/kube-apiserver-client"),
            json!("alice"),
            json!("24h"),
            json!("Approved,Issued")
        ]
    );
    let pdb = json!({"metadata": {"name": "p"}, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
    let c = cells_of(&table("policy", "poddisruptionbudgets", vec![pdb]));
    assert_eq!(c[1..4].to_vec(), vec![json!("50%"), json!("N/A"), json!(1)]);
    let api = json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1"},
        "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}});
    let t = table("apiregistration.k8s.io", "apiservices", vec![api]);
    assert_eq!(column_names(&t), ["Name", "Service", "Available", "Age"]);
    assert_eq!(
        cells_of(&t)[1..3].to_vec(),
        vec![json!("Local"), json!("True")]
    );
    let pl = json!({"metadata": {"name": "exempt"}, "spec": {"type": "Exempt", "exempt": {}}});
    let c = cells_of(&table(
        "flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations",
        vec![pl],
    ));
    assert_eq!(
        c[1..6].to_vec(),
        vec![
            json!("Exempt"),
            json!("<none>"),
            json!("<none>"),
            json!("<none>"),
            json!("<none>")
        ]
    );
}

#[test]
fn flow_schemas_are_sorted_by_precedence() {
    let fs = |name: &str, p: i64| json!({"metadata": {"name": name}, "spec": {"priorityLevelConfiguration": {"name": "global"}, "matchingPrecedence": p}});
    let t = table(
        "flowcontrol.apiserver.k8s.io",
        "flowschemas",
        vec![fs("b", 1000), fs("exempt", 1), fs("a", 1000)],
    );
    let names: Vec<Value> = t["rows"]
        .as_array()
        .map(|rows| rows.iter().map(|r| r["cells"][0].clone()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec![json!("exempt"), json!("a"), json!("b")]);
    assert_eq!(t["rows"][0]["cells"][3], "<none>");
    assert_eq!(t["rows"][0]["cells"][5], "?");
}

#[test]
fn label_selector_formatting() {
    let sel = |v: Value| label_selector_string(J::Val(&v));
    assert_eq!(sel(json!({})), Ok(String::new()));
    assert_eq!(format_label_selector(J::Missing), "<none>");
    assert_eq!(
        sel(json!({"matchExpressions": [
            {"key": "z", "operator": "Exists"},
            {"key": "a", "operator": "DoesNotExist"},
            {"key": "m", "operator": "NotIn", "values": ["y", "x"]}]})),
        Ok("!a,m notin (x,y),z".to_owned())
    );
    assert_eq!(
        sel(json!({"matchExpressions": [{"key": "a", "operator": "Bogus"}]})),
        Err(())
    );
    assert_eq!(
        format_label_selector(J::Val(
            &json!({"matchExpressions": [{"key": "a", "operator": "In"}]})
        )),
        "<error>"
    );
    assert_eq!(
        format_labels(J::Val(&json!({"b": "2", "a": "1"}))),
        "a=1,b=2"
    );
    assert_eq!(format_labels(J::Missing), "<none>");
}

#[test]
fn every_printer_fills_its_columns() {
    // Every served resource prints an empty object without panicking, with a cell per column
    // (IP addresses carry one extra cell, as upstream's do).
    for r in BUILTIN {
        let o = obj(json!({"metadata": {"name": "x"}}));
        let t = table_at(r, &[o], json!({}), IncludeObject::Metadata, now());
        let columns = t["columnDefinitions"].as_array().map_or(0, Vec::len);
        let cells = t["rows"][0]["cells"].as_array().map_or(0, Vec::len);
        let extra = usize::from(r.plural == "ipaddresses");
        assert_eq!(cells, columns + extra, "{}.{}", r.plural, r.group);
        assert_eq!(
            t["columnDefinitions"][usize::from(r.plural == "events") * 9]["format"],
            "name",
            "{}",
            r.plural
        );
    }
}
