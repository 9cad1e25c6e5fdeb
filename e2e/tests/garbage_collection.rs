//! The garbage collector inside `capstan server`: `kubectl delete --cascade=background`
//! removes dependents after the owner, `--cascade=foreground` removes them before the owner
//! (the owner waits with the `foregroundDeletion` finalizer), `--cascade=orphan` strips the
//! dependents' ownerReferences and keeps them; dependents of owners that do not exist (or
//! exist with another uid) are deleted.

use std::time::Duration;

use e2e::ServerProcess;
use e2e::cli::{cluster, json, ok, wait_for};
use serde_json::Value;

fn create(s: &ServerProcess, doc: &str) -> Value {
    let (ok, out, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-o", "json", "-f", "-"],
            Some(doc),
        )
        .expect("kubectl runs");
    assert!(ok, "kubectl create failed: {err}");
    serde_json::from_str(&out).expect("json")
}

fn count(s: &ServerProcess, kind: &str, selector: &str) -> usize {
    json(s, &["get", kind, "-l", selector, "-o", "json"])["items"]
        .as_array()
        .map_or(0, Vec::len)
}

fn deploy(s: &ServerProcess, name: &str) {
    ok(
        s,
        &[
            "create",
            "deployment",
            name,
            "--image=nginx",
            "--replicas=2",
        ],
    );
    let out = ok(
        s,
        &[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=120s",
        ],
    );
    assert!(out.contains("successfully rolled out"));
}

#[test]
fn cascading_deletion_of_deployments() {
    let (_d, s) = cluster();
    // Background: the deployment goes at once, then its ReplicaSet and pods.
    deploy(&s, "bg");
    ok(
        &s,
        &[
            "delete",
            "deployment",
            "bg",
            "--cascade=background",
            "--wait=false",
        ],
    );
    wait_for(&s, 60, "background dependents gone", || {
        (count(&s, "rs", "app=bg") == 0 && count(&s, "pods", "app=bg") == 0).then_some(())
    });

    // Foreground: the deployment waits (foregroundDeletion) until its dependents are gone.
    deploy(&s, "fg");
    ok(
        &s,
        &[
            "delete",
            "deployment",
            "fg",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    let d = json(&s, &["get", "deployment", "fg", "-o", "json"]);
    assert!(!d["metadata"]["deletionTimestamp"].is_null());
    assert!(
        d["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f == "foregroundDeletion"),
        "{d}"
    );
    wait_for(&s, 60, "foreground deletion to finish", || {
        let (found, _, _) = s.kubectl(&["get", "deployment", "fg"]).ok()?;
        (!found && count(&s, "rs", "app=fg") == 0 && count(&s, "pods", "app=fg") == 0).then_some(())
    });

    // Orphan: ReplicaSet and pods stay, without the reference to the deployment.
    deploy(&s, "orph");
    ok(&s, &["delete", "deployment", "orph", "--cascade=orphan"]);
    let (found, _, _) = s.kubectl(&["get", "deployment", "orph"]).expect("kubectl");
    assert!(!found, "orphaned deployment is gone");
    std::thread::sleep(Duration::from_secs(2));
    let rss = json(&s, &["get", "rs", "-l", "app=orph", "-o", "json"]);
    let rss = rss["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(rss.len(), 1);
    assert!(
        rss[0]["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{}",
        rss[0]
    );
    assert_eq!(count(&s, "pods", "app=orph"), 2);
    // The ReplicaSet still runs its pods: delete one, it comes back.
    let pods = json(&s, &["get", "pods", "-l", "app=orph", "-o", "json"]);
    let name = pods["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ok(&s, &["delete", "pod", &name]);
    wait_for(&s, 60, "orphaned ReplicaSet keeps 2 pods", || {
        let pods = json(&s, &["get", "pods", "-l", "app=orph", "-o", "json"]);
        let names: Vec<&str> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["metadata"]["name"].as_str())
            .collect();
        (names.len() == 2 && !names.contains(&name.as_str())).then_some(())
    });
}

#[test]
fn dangling_owners_and_blocking_dependents() {
    let (_d, s) = cluster();
    // A dependent of an owner that never existed is deleted.
    create(
        &s,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dangling","labels":{"gc":"t"},
            "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":"00000000-0000-0000-0000-000000000001"}]}}"#,
    );
    // A dependent whose owner has the same name but another uid is deleted too.
    create(
        &s,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"real-owner"}}"#,
    );
    create(
        &s,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"wrong-uid","labels":{"gc":"t"},
            "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"real-owner","uid":"00000000-0000-0000-0000-000000000002"}]}}"#,
    );
    // One with a live owner stays.
    let owner = create(
        &s,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}"#,
    );
    let uid = owner["metadata"]["uid"].as_str().expect("uid").to_owned();
    for (name, block) in [("kept", true), ("kept2", false)] {
        create(
            &s,
            &format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"gc":"owned"}},
                "ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"{uid}","blockOwnerDeletion":{block}}}]}}}}"#
            ),
        );
    }
    wait_for(&s, 60, "dangling dependents deleted", || {
        (count(&s, "cm", "gc=t") == 0).then_some(())
    });
    assert_eq!(count(&s, "cm", "gc=owned"), 2);

    // A blocking dependent holding a finalizer keeps the owner (foreground) until it goes.
    ok(
        &s,
        &[
            "patch",
            "cm",
            "kept",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ],
    );
    ok(
        &s,
        &[
            "delete",
            "cm",
            "owner",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    wait_for(&s, 60, "dependents marked for deletion", || {
        let kept = json(&s, &["get", "cm", "kept", "-o", "json"]);
        let kept2_gone = !s.kubectl(&["get", "cm", "kept2"]).ok()?.0;
        (!kept["metadata"]["deletionTimestamp"].is_null() && kept2_gone).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let o = json(&s, &["get", "cm", "owner", "-o", "json"]);
    assert!(
        o["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f == "foregroundDeletion"),
        "{o}"
    );
    ok(
        &s,
        &[
            "patch",
            "cm",
            "kept",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    wait_for(&s, 60, "the owner to go", || {
        (!s.kubectl(&["get", "cm", "owner"]).ok()?.0).then_some(())
    });
}
