use serde_json::{Value, json};

use super::super::managed;
use super::*;
use crate::patch::schema::root;

fn deployment() -> Ty {
    root("apps", "v1", "Deployment").unwrap()
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

#[test]
fn field_sets_use_keys_for_map_lists_and_leaves_for_atomic_values() {
    let config = obj(json!({
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"spec": {"containers": [{
                "name": "c", "image": "nginx",
                "ports": [{"containerPort": 80}],
                "args": ["a", "b"]
            }]}}
        }
    }));
    let set = object_set(&config, deployment());
    assert_eq!(
        set.to_json(),
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"c\"}": {
                        ".": {},
                        "f:args": {},
                        "f:image": {},
                        "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}
                        }}
                    }
                }}}
            }
        })
    );
}

#[test]
fn apply_merges_map_lists_by_key_and_replaces_atomic_lists() {
    let live = obj(json!({"spec": {"template": {"spec": {"containers": [
        {"name": "a", "image": "1", "args": ["x"]},
        {"name": "b", "image": "2"}
    ]}}}}));
    let config = obj(json!({"spec": {"template": {"spec": {"containers": [
        {"name": "b", "image": "3"},
        {"name": "a", "args": ["y", "z"]}
    ]}}}}));
    let merged = apply(&live, &config, deployment());
    assert_eq!(
        merged["spec"]["template"]["spec"]["containers"],
        json!([
            {"name": "a", "image": "1", "args": ["y", "z"]},
            {"name": "b", "image": "3"}
        ])
    );
}

#[test]
fn get_and_remove_follow_keys() {
    let mut v = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "a", "image": "1"}, {"name": "b", "image": "2"}
    ]}}}});
    let path: Vec<String> = vec![
        "f:spec".into(),
        "f:template".into(),
        "f:spec".into(),
        "f:containers".into(),
        "k:{\"name\":\"b\"}".into(),
        "f:image".into(),
    ];
    assert_eq!(get(&v, &path), Some(&json!("2")));
    remove(&mut v, &path[..5]);
    assert_eq!(
        v["spec"]["template"]["spec"]["containers"],
        json!([{"name": "a", "image": "1"}])
    );
}

#[test]
fn updates_own_what_they_changed() {
    let old = obj(json!({"spec": {"replicas": 1, "paused": false}}));
    let new =
        obj(json!({"spec": {"replicas": 2, "paused": false}, "metadata": {"labels": {"a": "b"}}}));
    assert_eq!(
        changed(&old, &new, deployment()).to_json(),
        json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}}, "f:spec": {"f:replicas": {}}})
    );
}

#[test]
fn apply_conflicts_force_and_removal() {
    let ty = deployment();
    let base = obj(json!({"metadata": {"name": "x"}}));
    let first = obj(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 1}}),
    );
    let live = managed::apply(&base, &first, ty, "one", "apps/v1", false).unwrap();
    assert_eq!(live["spec"]["replicas"], 1);
    // Another manager changing replicas conflicts; the same value does not.
    let other = obj(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": 3}}),
    );
    let conflicts = managed::apply(&live, &other, ty, "two", "apps/v1", false).unwrap_err();
    assert_eq!(
        managed::conflict_message(&conflicts),
        "Apply failed with 1 conflict: conflict with \"one\": .spec.replicas"
    );
    let same = obj(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": 1}}),
    );
    assert!(managed::apply(&live, &same, ty, "two", "apps/v1", false).is_ok());
    // Force takes ownership.
    let forced = managed::apply(&live, &other, ty, "two", "apps/v1", true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 3);
    let entries = managed::entries(&forced);
    let one = entries.iter().find(|e| e.manager == "one").unwrap();
    assert!(!one.fields.has(&["f:spec".into(), "f:replicas".into()]));
    // "one" stops applying label b and replicas (now owned by "two"): b goes, replicas stays.
    let again = obj(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": {"a": "1"}}}),
    );
    let out = managed::apply(&forced, &again, ty, "one", "apps/v1", false).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"a": "1"}));
    assert_eq!(out["spec"]["replicas"], 3);
}

/// A custom kind registered from a structural schema with every list and map marker.
fn widget() -> Ty {
    let schema = crate::crd::schema::Structural::new(&json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {
                        "name": {"type": "string"}, "port": {"type": "integer"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set",
                    "items": {"type": "string"}},
                "args": {"type": "array", "items": {"type": "string"}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                    "additionalProperties": {"type": "string"}},
                "env": {"type": "object", "additionalProperties": {"type": "string"}}
            }}
        }
    }));
    crate::patch::schema::custom_type_of(&schema)
}

#[test]
fn custom_schemas_merge_by_their_markers() {
    let ty = widget();
    let live = obj(json!({"spec": {
        "ports": [{"name": "http", "port": 80}],
        "tags": ["a"],
        "args": ["x", "y"],
        "selector": {"a": "1", "b": "2"},
        "env": {"A": "1"}
    }}));
    let applied = obj(json!({"spec": {
        "ports": [{"name": "https", "port": 443}],
        "tags": ["b"],
        "args": ["z"],
        "selector": {"c": "3"},
        "env": {"B": "2"}
    }}));
    let merged = apply(&live, &applied, ty);
    assert_eq!(
        Value::Object(merged),
        json!({"spec": {
            "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
            "tags": ["a", "b"],
            "args": ["z"],
            "selector": {"c": "3"},
            "env": {"A": "1", "B": "2"}
        }})
    );
}

#[test]
fn custom_field_sets_use_keys_values_and_atomic_leaves() {
    let ty = widget();
    let config = obj(json!({
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "ports": [{"name": "http", "port": 80}],
            "tags": ["a"],
            "args": ["x"],
            "selector": {"a": "1"},
            "env": {"A": "1"}
        }
    }));
    assert_eq!(
        object_set(&config, ty).to_json(),
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:ports": {"k:{\"name\":\"http\"}": {".": {}, "f:name": {}, "f:port": {}}},
                "f:tags": {"v:\"a\"": {}},
                "f:args": {},
                "f:selector": {},
                "f:env": {"f:A": {}}
            }
        })
    );
}

#[test]
fn built_in_roots_stay_static_and_custom_kinds_get_no_strategic_root() {
    let schema = crate::crd::schema::Structural::new(&json!({"type": "object"}));
    crate::patch::schema::register_custom([("merge-test.example.com", "v1", "Widget", &schema)]);
    assert_eq!(root("merge-test.example.com", "v1", "Widget"), None);
    assert_eq!(widget(), widget());
    assert!(crate::patch::schema::custom_root("apps", "v1", "Deployment").is_none());
    assert!(deployment().declares("spec"));
}
