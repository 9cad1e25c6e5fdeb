//! Strategic merge patch, one test per directive and list strategy, from the upstream
//! documentation (sig-api-machinery/strategic-merge-patch.md) and its examples.

use serde_json::{Value, json};

use super::schema::{self, Ty};
use super::strategic::{self, SmpError};

const POD_SPEC: Ty = Ty::Struct("core/v1.PodSpec");

fn obj(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn smp(ty: Ty, original: Value, patch: Value) -> Result<Value, SmpError> {
    strategic::apply(obj(original), obj(patch), ty).map(Value::Object)
}

fn ok(ty: Ty, original: Value, patch: Value) -> Value {
    match smp(ty, original, patch) {
        Ok(v) => v,
        Err(e) => panic!("patch failed: {e:?}"),
    }
}

#[test]
fn patch_schema_roots_and_tags() {
    assert_eq!(
        schema::root("apps", "v1", "Deployment"),
        Some(Ty::Struct("apps/v1.Deployment"))
    );
    assert_eq!(
        schema::root("", "v1", "Pod"),
        Some(Ty::Struct("core/v1.Pod"))
    );
    assert_eq!(schema::root("example.com", "v1", "Widget"), None);
    let c = POD_SPEC.field("containers");
    assert_eq!(c.merge_key, Some("name"));
    assert_eq!(c.strategy, schema::Strategy::Merge);
    assert_eq!(c.item_ty(), Ty::Struct("core/v1.Container"));
    let ports = Ty::Struct("core/v1.Container").field("ports");
    assert_eq!(ports.merge_key, Some("containerPort"));
    let fin = Ty::Struct("meta/v1.ObjectMeta").field("finalizers");
    assert_eq!(fin.strategy, schema::Strategy::Merge);
    assert_eq!(fin.merge_key, None);
    assert_eq!(
        POD_SPEC.field("tolerations").strategy,
        schema::Strategy::Default
    );
}

#[test]
fn patch_maps_merge_and_null_deletes() {
    let out = ok(
        Ty::Struct("meta/v1.ObjectMeta"),
        json!({"name": "x", "labels": {"a": "1", "b": "2"}}),
        json!({"labels": {"a": null, "c": "3"}, "annotations": {"k": "v", "gone": null}}),
    );
    assert_eq!(
        out,
        json!({"name": "x", "labels": {"b": "2", "c": "3"}, "annotations": {"k": "v"}})
    );
}

#[test]
fn patch_list_merge_by_key() {
    // Upstream's order: patch items in patch order; the server-only "b" goes before the
    // first patch item that follows it in the live list, and "c" (not live) follows "a";
    // likewise the new env "Y" comes before the live-only "X".
    let out = ok(
        POD_SPEC,
        json!({"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}
        ]}),
        json!({"containers": [
            {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
            {"name": "c", "image": "c:1"}
        ]}),
    );
    assert_eq!(
        out,
        json!({"containers": [
            {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}]},
            {"name": "c", "image": "c:1"},
            {"name": "b", "image": "b:1"}
        ]})
    );
}

#[test]
fn patch_list_without_strategy_is_replaced() {
    let out = ok(
        POD_SPEC,
        json!({"tolerations": [{"key": "a"}, {"key": "b"}]}),
        json!({"tolerations": [{"key": "c"}]}),
    );
    assert_eq!(out, json!({"tolerations": [{"key": "c"}]}));
    let out = ok(
        Ty::Struct("core/v1.Container"),
        json!({"args": ["a", "b"]}),
        json!({"args": ["c"]}),
    );
    assert_eq!(out, json!({"args": ["c"]}));
}

#[test]
fn patch_primitive_list_merge_is_a_set_union() {
    let out = ok(
        Ty::Struct("meta/v1.ObjectMeta"),
        json!({"finalizers": ["a", "b"]}),
        json!({"finalizers": ["b", "c"]}),
    );
    assert_eq!(out, json!({"finalizers": ["a", "b", "c"]}));
}

#[test]
fn patch_delete_from_primitive_list() {
    let out = ok(
        Ty::Struct("meta/v1.ObjectMeta"),
        json!({"finalizers": ["a", "b", "c"]}),
        json!({"$deleteFromPrimitiveList/finalizers": ["b"]}),
    );
    assert_eq!(out, json!({"finalizers": ["a", "c"]}));
    let err = smp(
        Ty::Struct("meta/v1.ObjectMeta"),
        json!({"finalizers": ["a"]}),
        json!({"$deleteFromPrimitiveList": ["a"]}),
    );
    assert_eq!(
        err,
        Err(SmpError::BadRequest(
            "invalid patch format of primitive list".into()
        ))
    );
}

#[test]
fn patch_list_item_delete_directive() {
    let out = ok(
        POD_SPEC,
        json!({"containers": [{"name": "a"}, {"name": "b"}]}),
        json!({"containers": [{"name": "a", "$patch": "delete"}]}),
    );
    assert_eq!(out, json!({"containers": [{"name": "b"}]}));
}

#[test]
fn patch_list_item_replace_directive() {
    let out = ok(
        POD_SPEC,
        json!({"containers": [{"name": "a", "image": "a"}, {"name": "b"}]}),
        json!({"containers": [{"name": "c"}, {"$patch": "replace"}]}),
    );
    assert_eq!(out, json!({"containers": [{"name": "c"}]}));
}

#[test]
fn patch_map_replace_and_delete_directives() {
    let out = ok(
        POD_SPEC,
        json!({"nodeSelector": {"a": "1", "b": "2"}, "dnsConfig": {"nameservers": ["1.1.1.1"]}}),
        json!({"nodeSelector": {"c": "3", "$patch": "replace"}, "dnsConfig": {"$patch": "delete"}}),
    );
    assert_eq!(out, json!({"nodeSelector": {"c": "3"}, "dnsConfig": {}}));
    let err = smp(
        POD_SPEC,
        json!({"a": {}}),
        json!({"a": {"$patch": "bogus"}}),
    );
    assert!(matches!(err, Err(SmpError::Other(m)) if m.starts_with("unknown patch type: bogus")));
}

#[test]
fn patch_retain_keys() {
    let ty = Ty::Struct("apps/v1.DeploymentSpec");
    let out = ok(
        ty,
        json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}),
        json!({"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}),
    );
    assert_eq!(out, json!({"strategy": {"type": "Recreate"}}));
    let err = smp(
        ty,
        json!({"strategy": {"type": "RollingUpdate"}}),
        json!({"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}),
    );
    assert_eq!(
        err,
        Err(SmpError::BadRequest(
            "invalid patch format of retainKeys".into()
        ))
    );
}

#[test]
fn patch_set_element_order() {
    let out = ok(
        POD_SPEC,
        json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
        json!({
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "new"}]
        }),
    );
    assert_eq!(
        out,
        json!({"containers": [{"name": "c"}, {"name": "a", "image": "new"}, {"name": "b"}]})
    );
}

#[test]
fn patch_set_element_order_with_deletion_as_kubectl_apply_sends() {
    // kubectl apply after removing container "b" and adding "d".
    let out = ok(
        POD_SPEC,
        json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
        json!({
            "$setElementOrder/containers": [{"name": "a"}, {"name": "d"}, {"name": "c"}],
            "containers": [{"name": "d", "image": "d"}, {"name": "b", "$patch": "delete"}]
        }),
    );
    assert_eq!(
        out,
        json!({"containers": [{"name": "a"}, {"name": "d", "image": "d"}, {"name": "c"}]})
    );
}

#[test]
fn patch_server_only_items_keep_their_place() {
    let out = ok(
        POD_SPEC,
        json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
        json!({"containers": [{"name": "c", "image": "x"}, {"name": "a", "image": "y"}]}),
    );
    // Patch order wins for patch items; server-only "b" goes before "c", which followed it
    // in the live list (upstream's mergeSortedSlice).
    assert_eq!(
        out,
        json!({"containers": [{"name": "b"}, {"name": "c", "image": "x"}, {"name": "a", "image": "y"}]})
    );
}

#[test]
fn patch_missing_merge_key_and_lists_of_lists() {
    let err = smp(
        POD_SPEC,
        json!({"containers": [{"name": "a"}]}),
        json!({"containers": [{"image": "x"}]}),
    );
    assert_eq!(
        err,
        Err(SmpError::Other(
            "map: map[image:x] does not contain declared merge key: name".into()
        ))
    );
    let err = smp(
        Ty::Struct("meta/v1.ObjectMeta"),
        json!({"finalizers": [["a"]]}),
        json!({"finalizers": [["b"]]}),
    );
    assert!(matches!(err, Err(SmpError::Unprocessable(_))));
}

#[test]
fn patch_new_fields_drop_directives_and_nulls() {
    let out = ok(
        POD_SPEC,
        json!({}),
        json!({"containers": [{"name": "a", "x": null}, {"name": "b", "$patch": "delete"}]}),
    );
    assert_eq!(out, json!({"containers": [{"name": "a"}]}));
}

#[test]
fn patch_deployment_apply_update() {
    let ty = match schema::root("apps", "v1", "Deployment") {
        Some(t) => t,
        None => panic!("no Deployment"),
    };
    let live = json!({
        "metadata": {"name": "x", "labels": {"app": "x", "tier": "web"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "c", "image": "nginx:1", "ports": [{"containerPort": 80}, {"containerPort": 81}],
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "old", "image": "busybox"}
        ]}}}
    });
    let patch = json!({
        "metadata": {"labels": {"tier": null}},
        "spec": {"replicas": 2, "template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "side"}],
            "containers": [
                {"name": "c", "image": "nginx:2",
                 "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                 "env": [{"name": "C", "value": "3"}, {"name": "B", "$patch": "delete"}],
                 "$setElementOrder/ports": [{"containerPort": 80}],
                 "ports": [{"containerPort": 81, "$patch": "delete"}]},
                {"name": "side", "image": "sidecar"},
                {"name": "old", "$patch": "delete"}
            ]}}}
    });
    let out = ok(ty, live, patch);
    assert_eq!(
        out,
        json!({
            "metadata": {"name": "x", "labels": {"app": "x"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "c", "image": "nginx:2", "ports": [{"containerPort": 80}],
                 "env": [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}]},
                {"name": "side", "image": "sidecar"}
            ]}}}
        })
    );
}
