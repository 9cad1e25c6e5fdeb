//! Rule-by-rule tests: exact field paths and messages, and valid defaulted objects pass.

use serde_json::{Value, json};

use super::validate;
use crate::registry::Registry;

/// Defaults `obj` as `group/version` `plural` (as the request path does), then validates it
/// (against `old` when given) and returns `(field, message)` pairs.
fn check_update(
    group: &str,
    plural: &str,
    obj: Value,
    old: Option<Value>,
) -> Vec<(String, String)> {
    let registry = Registry::builtin();
    let r = registry.find(group, "v1", plural).unwrap();
    let Value::Object(mut map) = obj else {
        panic!("not an object");
    };
    crate::defaults::apply(r, &mut map);
    let old = old.map(|o| {
        let Value::Object(mut m) = o else {
            panic!("not an object");
        };
        crate::defaults::apply(r, &mut m);
        m
    });
    validate(r, &map, old.as_ref())
        .into_iter()
        .map(|e| (e.field, e.message))
        .collect()
}

fn check(group: &str, plural: &str, obj: Value) -> Vec<(String, String)> {
    check_update(group, plural, obj, None)
}

fn pair(f: &str, m: &str) -> (String, String) {
    (f.to_owned(), m.to_owned())
}

fn pod(spec: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    p["spec"] = spec;
    p
}

fn deployment(spec: Value) -> Value {
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}});
    d["spec"] = spec;
    d
}

fn nginx() -> Value {
    json!({"containers": [{"name": "nginx", "image": "nginx"}]})
}

#[test]
fn valid_defaulted_objects_pass() {
    assert_eq!(check("", "pods", pod(nginx())), vec![]);
    let d = deployment(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": nginx()},
    }));
    assert_eq!(check("apps", "deployments", d), vec![]);
    for plural in ["replicasets", "statefulsets", "daemonsets"] {
        let o = json!({"metadata": {"name": "x"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": nginx()},
        }});
        assert_eq!(check("apps", plural, o), vec![], "{plural}");
    }
    let rc = json!({"metadata": {"name": "x"}, "spec": {
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": nginx()},
    }});
    // RC defaulting copies the template labels into the selector.
    assert_eq!(check("", "replicationcontrollers", rc), vec![]);
    let job = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}}});
    assert_eq!(check("batch", "jobs", job), vec![]);
    let cj = json!({"metadata": {"name": "cj"}, "spec": {"schedule": "*/5 * * * *",
        "jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "OnFailure"}}}}}});
    assert_eq!(check("batch", "cronjobs", cj), vec![]);
    let svc = json!({"metadata": {"name": "s"}, "spec": {"selector": {"app": "web"},
        "ports": [{"port": 80, "targetPort": 8080}]}});
    assert_eq!(check("", "services", svc), vec![]);
    let cm = json!({"metadata": {"name": "c"}, "data": {"a.b": "x", "K_2": "y"}});
    assert_eq!(check("", "configmaps", cm), vec![]);
    let s = json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": "eA==", "tls.key": "eA=="}});
    assert_eq!(check("", "secrets", s), vec![]);
}

#[test]
fn containers_are_required() {
    assert_eq!(
        check("", "pods", pod(json!({}))),
        vec![pair("spec.containers", "Required value")]
    );
}

#[test]
fn container_names_and_images() {
    let errs = check(
        "",
        "pods",
        pod(json!({
            "containers": [{"name": "c", "image": "x"}, {"name": "c", "image": ""}, {"name": "Bad_Name", "image": "x"}],
            "initContainers": [{"name": "c", "image": "x"}, {"image": "x"}],
        })),
    );
    assert_eq!(
        errs,
        vec![
            pair("spec.containers[1].image", "Required value"),
            pair("spec.containers[1].name", "Duplicate value: \"c\""),
            pair(
                "spec.containers[2].name",
                "Invalid value: \"Bad_Name\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ),
            pair("spec.initContainers[0].name", "Duplicate value: \"c\""),
            pair("spec.initContainers[1].name", "Required value"),
        ]
    );
}

#[test]
fn ports() {
    let errs = check(
        "",
        "pods",
        pod(json!({"containers": [{"name": "c", "image": "x", "ports": [
            {"containerPort": 70000, "protocol": "HTTP", "name": "this-name-is-too-long"},
            {"containerPort": 80, "name": "123"},
            {"containerPort": 81, "name": "web"},
            {"containerPort": 82, "name": "web"},
        ]}]})),
    );
    assert_eq!(
        errs,
        vec![
            pair(
                "spec.containers[0].ports[0].name",
                "Invalid value: \"this-name-is-too-long\": must be no more than 15 characters"
            ),
            pair(
                "spec.containers[0].ports[0].containerPort",
                "Invalid value: 70000: must be between 1 and 65535, inclusive"
            ),
            pair(
                "spec.containers[0].ports[0].protocol",
                "Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\""
            ),
            pair(
                "spec.containers[0].ports[1].name",
                "Invalid value: \"123\": must contain at least one letter (a-z)"
            ),
            pair(
                "spec.containers[0].ports[3].name",
                "Duplicate value: \"web\""
            ),
        ]
    );
}

#[test]
fn policies() {
    let errs = check(
        "",
        "pods",
        pod(
            json!({"restartPolicy": "Sometimes", "dnsPolicy": "Bad", "activeDeadlineSeconds": 0,
            "containers": [{"name": "c", "image": "x", "imagePullPolicy": "Maybe", "terminationMessagePolicy": "Foo"}]}),
        ),
    );
    assert_eq!(
        errs,
        vec![
            pair(
                "spec.containers[0].terminationMessagePolicy",
                "Unsupported value: \"Foo\": supported values: \"File\", \"FallbackToLogsOnError\""
            ),
            pair(
                "spec.containers[0].imagePullPolicy",
                "Unsupported value: \"Maybe\": supported values: \"Always\", \"IfNotPresent\", \"Never\""
            ),
            pair(
                "spec.restartPolicy",
                "Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
            pair(
                "spec.dnsPolicy",
                "Unsupported value: \"Bad\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\""
            ),
            pair(
                "spec.activeDeadlineSeconds",
                "Invalid value: 0: must be between 1 and 2147483647, inclusive"
            ),
        ]
    );
}

#[test]
fn volumes_and_mounts() {
    let errs = check(
        "",
        "pods",
        pod(
            json!({"volumes": [{"name": "a"}, {"name": "a"}, {"name": "B"}],
            "containers": [{"name": "c", "image": "x", "volumeMounts": [
                {"name": "a", "mountPath": "/a"}, {"name": "v", "mountPath": "/a"}]}]}),
        ),
    );
    assert_eq!(
        errs[0],
        pair("spec.volumes[1].name", "Duplicate value: \"a\"")
    );
    assert_eq!(errs[1].0, "spec.volumes[2].name");
    assert!(
        errs[1]
            .1
            .starts_with("Invalid value: \"B\": a lowercase RFC 1123 label")
    );
    assert_eq!(
        errs[2..],
        [
            pair(
                "spec.containers[0].volumeMounts[1].name",
                "Not found: \"v\""
            ),
            pair(
                "spec.containers[0].volumeMounts[1].mountPath",
                "Invalid value: \"/a\": must be unique"
            ),
        ]
    );
}

#[test]
fn resources_requests_not_above_limits() {
    let errs = check(
        "",
        "pods",
        pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}]})),
    );
    assert_eq!(
        errs,
        vec![pair(
            "spec.containers[0].resources.requests",
            "Invalid value: \"2\": must be less than or equal to cpu limit of 1"
        )]
    );
    let ok = check(
        "",
        "pods",
        pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"memory": "1Gi", "cpu": "1"}, "requests": {"memory": "512Mi", "cpu": "500m"}}}]})),
    );
    assert_eq!(ok, vec![]);
}

#[test]
fn deployment_selector_and_template() {
    let errs = check(
        "apps",
        "deployments",
        deployment(json!({"selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "y"}}, "spec": nginx()}})),
    );
    assert_eq!(
        errs,
        vec![pair(
            "spec.template.metadata.labels",
            "Invalid value: map[string]string{\"app\":\"y\"}: `selector` does not match template `labels`"
        )]
    );
    let errs = check(
        "apps",
        "deployments",
        deployment(json!({"template": {"metadata": {"labels": {"app": "y"}}, "spec": nginx()}})),
    );
    assert_eq!(
        errs,
        vec![
            pair("spec.selector", "Required value"),
            pair(
                "spec.template.metadata.labels",
                "Invalid value: map[string]string{\"app\":\"y\"}: `selector` does not match template `labels`"
            ),
        ]
    );
    let errs = check(
        "apps",
        "deployments",
        deployment(json!({"selector": {}, "template": {"spec": nginx()}})),
    );
    assert_eq!(
        errs,
        vec![pair(
            "spec.selector",
            "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment"
        )]
    );
}

#[test]
fn deployment_numbers_strategy_and_restart_policy() {
    let errs = check(
        "apps",
        "deployments",
        deployment(json!({"replicas": -1, "revisionHistoryLimit": -2,
            "selector": {"matchLabels": {"app": "x"}},
            "strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}})),
    );
    assert_eq!(
        errs,
        vec![
            pair(
                "spec.replicas",
                "Invalid value: -1: must be greater than or equal to 0"
            ),
            pair(
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Never\": supported values: \"Always\""
            ),
            pair(
                "spec.strategy.rollingUpdate.maxUnavailable",
                "Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0"
            ),
            pair(
                "spec.revisionHistoryLimit",
                "Invalid value: -2: must be greater than or equal to 0"
            ),
        ]
    );
    let errs = check(
        "apps",
        "deployments",
        deployment(
            json!({"selector": {"matchLabels": {"app": "x"}}, "strategy": {"type": "Sometimes"},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": nginx()}}),
        ),
    );
    assert_eq!(
        errs,
        vec![pair(
            "spec.strategy",
            "Unsupported value: apps.DeploymentStrategy{Type:\"Sometimes\", RollingUpdate:(*apps.RollingUpdateDeployment)(nil)}: supported values: \"Recreate\", \"RollingUpdate\""
        )]
    );
}

#[test]
fn selectors_are_immutable_on_update() {
    let make = |app: &str| {
        deployment(json!({"selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": nginx()}}))
    };
    assert_eq!(
        check_update("apps", "deployments", make("a"), Some(make("a"))),
        vec![]
    );
    assert_eq!(
        check_update("apps", "deployments", make("b"), Some(make("a"))),
        vec![pair(
            "spec.selector",
            "Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"b\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
        )]
    );
}

#[test]
fn stateful_set_and_daemon_set() {
    let ss = json!({"metadata": {"name": "s"}, "spec": {"selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"restartPolicy": "OnFailure", "containers": []}}}});
    assert_eq!(
        check("apps", "statefulsets", ss),
        vec![pair(
            "spec.template.spec.restartPolicy",
            "Unsupported value: \"OnFailure\": supported values: \"Always\""
        )]
    );
    let ds = json!({"metadata": {"name": "d"}, "spec": {
        "updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": nginx()}}});
    assert_eq!(
        check("apps", "daemonsets", ds),
        vec![
            pair(
                "spec.template.metadata.labels",
                "Invalid value: map[string]string{\"app\":\"x\"}: `selector` does not match template `labels`"
            ),
            pair(
                "spec.updateStrategy.rollingUpdate.maxUnavailable",
                "Required value: cannot be 0 when maxSurge is 0"
            ),
        ]
    );
    let old = json!({"metadata": {"name": "s"}, "spec": {"serviceName": "a", "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": nginx()}}});
    let mut new = old.clone();
    new["spec"]["serviceName"] = json!("b");
    new["spec"]["replicas"] = json!(3);
    assert_eq!(
        check_update("apps", "statefulsets", new, Some(old)),
        vec![pair(
            "spec",
            "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
        )]
    );
}

#[test]
fn replication_controller() {
    let rc = json!({"metadata": {"name": "r"}, "spec": {"replicas": -1, "selector": {"app": "x"},
        "template": {"metadata": {"labels": {"app": "y"}}, "spec": nginx()}}});
    assert_eq!(
        check("", "replicationcontrollers", rc),
        vec![
            pair(
                "spec.replicas",
                "Invalid value: -1: must be greater than or equal to 0"
            ),
            pair(
                "spec.template.metadata.labels",
                "Invalid value: map[string]string{\"app\":\"y\"}: `selector` does not match template `labels`"
            ),
        ]
    );
}

#[test]
fn job_restart_policy_and_counts() {
    let job = |restart: Option<&str>, extra: Value| {
        let mut spec = json!({"containers": [{"name": "c", "image": "x"}]});
        if let Some(r) = restart {
            spec["restartPolicy"] = json!(r);
        }
        let mut j = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": spec}}});
        for (k, v) in extra.as_object().unwrap() {
            j["spec"][k] = v.clone();
        }
        j
    };
    let required = pair(
        "spec.template.spec.restartPolicy",
        "Required value: valid values: \"OnFailure\", \"Never\"",
    );
    assert_eq!(
        check("batch", "jobs", job(None, json!({}))),
        vec![required.clone()]
    );
    assert_eq!(
        check("batch", "jobs", job(Some("Always"), json!({}))),
        vec![required]
    );
    assert_eq!(
        check("batch", "jobs", job(Some("Never"), json!({}))),
        vec![]
    );
    assert_eq!(
        check(
            "batch",
            "jobs",
            job(
                Some("Never"),
                json!({"completions": -1, "parallelism": -1, "backoffLimit": -1})
            )
        ),
        vec![
            pair(
                "spec.parallelism",
                "Invalid value: -1: must be greater than or equal to 0"
            ),
            pair(
                "spec.completions",
                "Invalid value: -1: must be greater than or equal to 0"
            ),
            pair(
                "spec.backoffLimit",
                "Invalid value: -1: must be greater than or equal to 0"
            ),
        ]
    );
    // Updates: the template is immutable, parallelism is not.
    let old = job(Some("Never"), json!({}));
    let mut new = old.clone();
    new["spec"]["parallelism"] = json!(3);
    new["spec"]["completions"] = json!(1);
    assert_eq!(
        check_update("batch", "jobs", new.clone(), Some(old.clone())),
        vec![]
    );
    new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("y");
    let errs = check_update("batch", "jobs", new, Some(old));
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].0, "spec.template");
    assert!(errs[0].1.ends_with(": field is immutable"));
}

#[test]
fn cron_job_schedule_and_policy() {
    let cj = |schedule: &str, policy: &str| {
        json!({"metadata": {"name": "c"}, "spec": {"schedule": schedule, "concurrencyPolicy": policy,
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x"}]}}}}}})
    };
    for ok in [
        "@hourly",
        "0 0 * * *",
        "*/15 1-5 1,15 jan-mar mon-fri",
        "@every 1h30m",
    ] {
        assert_eq!(check("batch", "cronjobs", cj(ok, "Allow")), vec![], "{ok}");
    }
    assert_eq!(
        check("batch", "cronjobs", cj("foo", "Sometimes")),
        vec![
            pair(
                "spec.schedule",
                "Invalid value: \"foo\": expected exactly 5 fields, found 1: [foo]"
            ),
            pair(
                "spec.concurrencyPolicy",
                "Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\""
            ),
        ]
    );
    assert_eq!(
        check("batch", "cronjobs", cj("60 * * * *", "Forbid")),
        vec![pair(
            "spec.schedule",
            "Invalid value: \"60 * * * *\": end of range (60) above maximum (59): 60"
        )]
    );
    assert_eq!(
        check("batch", "cronjobs", cj("@often", "Forbid")),
        vec![pair(
            "spec.schedule",
            "Invalid value: \"@often\": unrecognized descriptor: @often"
        )]
    );
    assert_eq!(
        check("batch", "cronjobs", cj("", "Forbid")),
        vec![pair("spec.schedule", "Required value")]
    );
}

#[test]
fn services() {
    let svc = |spec: Value| json!({"metadata": {"name": "s"}, "spec": spec});
    assert_eq!(
        check("", "services", svc(json!({}))),
        vec![pair("spec.ports", "Required value")]
    );
    assert_eq!(
        check("", "services", svc(json!({"clusterIP": "None"}))),
        vec![]
    );
    assert_eq!(
        check(
            "",
            "services",
            svc(json!({"type": "ExternalName", "externalName": "example.com"}))
        ),
        vec![]
    );
    let errs = check(
        "",
        "services",
        svc(json!({"type": "Weird", "ports": [
            {"port": 70000, "protocol": "HTTP"},
            {"name": "a", "port": 80, "targetPort": 0},
            {"name": "a", "port": 81, "nodePort": 30001, "targetPort": "Bad"},
        ]})),
    );
    assert_eq!(
        errs,
        vec![
            pair("spec.ports[0].name", "Required value"),
            pair(
                "spec.ports[0].port",
                "Invalid value: 70000: must be between 1 and 65535, inclusive"
            ),
            pair(
                "spec.ports[0].protocol",
                "Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\""
            ),
            pair(
                "spec.ports[0].targetPort",
                "Invalid value: 70000: must be between 1 and 65535, inclusive"
            ),
            pair("spec.ports[2].name", "Duplicate value: \"a\""),
            pair(
                "spec.ports[2].targetPort",
                "Invalid value: \"Bad\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
            ),
            pair(
                "spec.type",
                "Unsupported value: \"Weird\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
            ),
        ]
    );
    let errs = check(
        "",
        "services",
        svc(json!({"ports": [{"port": 80, "nodePort": 30001}]})),
    );
    assert_eq!(
        errs,
        vec![pair(
            "spec.ports[0].nodePort",
            "Forbidden: may not be used when `type` is 'ClusterIP'"
        )]
    );
}

#[test]
fn config_map_and_secret_keys() {
    let cm = json!({"metadata": {"name": "c"}, "data": {"bad key": "x", "..x": "y"}});
    assert_eq!(
        check("", "configmaps", cm),
        vec![
            pair(
                "data[..x]",
                "Invalid value: \"..x\": must not start with '..'"
            ),
            pair(
                "data[bad key]",
                "Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
            ),
        ]
    );
    let big = "x".repeat(1024 * 1024 + 1);
    let cm = json!({"metadata": {"name": "c"}, "data": {"a": big}});
    assert_eq!(
        check("", "configmaps", cm),
        vec![pair("", "Too long: may not be more than 1048576 bytes")]
    );
    let s = json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}});
    assert_eq!(
        check("", "secrets", s),
        vec![pair("data[tls.key]", "Required value")]
    );
    let old = json!({"metadata": {"name": "s"}, "immutable": true, "data": {"a": "eA=="}});
    let new = json!({"metadata": {"name": "s"}, "immutable": true, "type": "Opaque", "data": {"a": "eQ=="}});
    assert_eq!(
        check_update("", "secrets", new, Some(old)),
        vec![pair(
            "data",
            "Forbidden: field is immutable when `immutable` is set"
        )]
    );
}

/// A pod whose spec has `tolerations`; the errors on them.
fn toleration_errors(tolerations: Value) -> Vec<(String, String)> {
    let mut spec = nginx();
    spec["tolerations"] = tolerations;
    check("", "pods", pod(spec))
}

#[test]
fn tolerations_keys_are_qualified_names() {
    assert_eq!(
        toleration_errors(json!([{"key": "bad key", "operator": "Exists"}])),
        vec![pair(
            "spec.tolerations[0].key",
            "Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )]
    );
    assert!(
        toleration_errors(json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}, {"operator": "Exists"}]))
            .is_empty()
    );
}

#[test]
fn tolerations_with_an_empty_key_need_exists() {
    assert_eq!(
        toleration_errors(json!([{"operator": "Equal", "value": "v"}])),
        vec![pair(
            "spec.tolerations[0].operator",
            "Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\""
        )]
    );
}

#[test]
fn toleration_seconds_need_no_execute() {
    assert_eq!(
        toleration_errors(
            json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 10}])
        ),
        vec![pair(
            "spec.tolerations[0].effect",
            "Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set"
        )]
    );
}

#[test]
fn toleration_values_follow_the_operator() {
    assert_eq!(
        toleration_errors(json!([
            {"key": "k", "operator": "Exists", "value": "v"},
            {"key": "k", "value": "not a label value"},
            {"key": "k", "operator": "Equal", "value": "fine"}
        ])),
        vec![
            pair(
                "spec.tolerations[0].operator",
                "Invalid value: \"v\": value must be empty when `operator` is 'Exists'"
            ),
            pair(
                "spec.tolerations[1].operator",
                "Invalid value: \"not a label value\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ),
        ]
    );
}

#[test]
fn toleration_operators_and_effects_are_known_ones() {
    assert_eq!(
        toleration_errors(json!([{"key": "k", "operator": "In", "effect": "Evict"}])),
        vec![
            pair(
                "spec.tolerations[0].operator",
                "Unsupported value: \"In\": supported values: \"Equal\", \"Exists\""
            ),
            pair(
                "spec.tolerations[0].effect",
                "Unsupported value: \"Evict\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
            ),
        ]
    );
}

#[test]
fn workload_templates_check_tolerations() {
    let mut spec = json!({
        "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": nginx()}
    });
    spec["template"]["spec"]["tolerations"] = json!([{"key": "k", "operator": "Bogus"}]);
    assert_eq!(
        check("apps", "deployments", deployment(spec)),
        vec![pair(
            "spec.template.spec.tolerations[0].operator",
            "Unsupported value: \"Bogus\": supported values: \"Equal\", \"Exists\""
        )]
    );
}
