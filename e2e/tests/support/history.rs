//! Rollout history of a DaemonSet or StatefulSet, driven by stock kubectl: ControllerRevisions
//! named `<owner>-<hash>`, controlled by the owner, labelled as its pods, holding the template
//! patch and the change-cause; `kubectl rollout history` (with `--revision`), `rollout undo`
//! renumbering the earlier revision, and `revisionHistoryLimit` trimming unused revisions.

use e2e::ServerProcess;
use e2e::cli::{json, ok, wait_for};
use serde_json::Value;

/// The owner's revisions (`app=<app>`), sorted by revision number.
pub(crate) fn revisions(s: &ServerProcess, app: &str) -> Vec<Value> {
    let v = json(
        s,
        &[
            "get",
            "controllerrevisions",
            "-l",
            &format!("app={app}"),
            "-o",
            "json",
        ],
    );
    let mut items = v["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|r| r["revision"].as_i64());
    items
}

/// Revision numbers and the image each one's template runs.
fn numbered_images(s: &ServerProcess, app: &str) -> Vec<(i64, String)> {
    revisions(s, app)
        .iter()
        .map(|r| {
            (
                r["revision"].as_i64().unwrap_or(0),
                r["data"]["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// Images of the app's live pods, sorted.
fn pod_images(s: &ServerProcess, app: &str) -> Vec<String> {
    let v = json(
        s,
        &["get", "pods", "-l", &format!("app={app}"), "-o", "json"],
    );
    let mut out: Vec<String> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            p["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    out.sort();
    out
}

/// Waits until `replicas` pods of the app run `image` and no other pod is left.
fn rolled_to(s: &ServerProcess, app: &str, replicas: usize, image: &str) {
    wait_for(
        s,
        120,
        &format!("{replicas} pods of {app} on {image}"),
        || (pod_images(s, app) == vec![image.to_owned(); replicas]).then_some(()),
    );
}

/// Sets the image of container `c` with a change-cause, as a user recording causes does.
fn set_image(s: &ServerProcess, resource: &str, image: &str) {
    ok(
        s,
        &[
            "annotate",
            resource,
            &format!("kubernetes.io/change-cause=image {image}"),
            "--overwrite",
        ],
    );
    ok(s, &["set", "image", resource, &format!("c={image}")]);
}

/// Runs the whole history workflow on `resource` (`daemonset/x` or `statefulset/x`) of kind
/// `kind`, whose pods are `app=<app>`, `replicas` of them, created on image `busybox:1` with
/// `revisionHistoryLimit: 2` and change-cause `image busybox:1`. `pod_hash` gives the value
/// a pod's `controller-revision-hash` label must have for a revision.
pub(crate) fn check_history(
    s: &ServerProcess,
    kind: &str,
    resource: &str,
    app: &str,
    replicas: usize,
    pod_hash: impl Fn(&Value) -> String,
) {
    let name = resource.split('/').nth(1).unwrap_or_default();
    rolled_to(s, app, replicas, "busybox:1");
    let owner = json(s, &["get", resource, "-o", "json"]);
    let revs = revisions(s, app);
    assert_eq!(revs.len(), 1, "{revs:?}");
    let r = &revs[0];
    let rev_name = r["metadata"]["name"].as_str().unwrap_or_default();
    assert!(rev_name.starts_with(&format!("{name}-")), "{r}");
    assert_eq!(r["revision"], 1, "{r}");
    let o = &r["metadata"]["ownerReferences"][0];
    assert_eq!(o["kind"], kind, "{r}");
    assert_eq!(o["uid"], owner["metadata"]["uid"], "{r}");
    assert_eq!(o["controller"], true, "{r}");
    assert_eq!(r["data"]["spec"]["template"]["$patch"], "replace", "{r}");
    assert_eq!(
        r["metadata"]["annotations"]["kubernetes.io/change-cause"], "image busybox:1",
        "{r}"
    );
    // Pods carry the revision's hash.
    let hashes = ok(
        s,
        &[
            "get",
            "pods",
            "-l",
            &format!("app={app}"),
            "-o",
            "jsonpath={.items[*].metadata.labels.controller-revision-hash}",
        ],
    );
    let want = pod_hash(r);
    assert!(
        !hashes.trim().is_empty() && hashes.split_whitespace().all(|h| h == want),
        "pods {hashes}, revision {r}"
    );
    // The server-side table, as `kubectl get controllerrevisions` prints it.
    let table = ok(s, &["get", "controllerrevisions"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "CONTROLLER", "REVISION", "AGE"], "{table}");
    let owner_col = format!("{}.apps/{name}", kind.to_lowercase());
    assert!(
        table
            .lines()
            .any(|l| l.contains(rev_name) && l.contains(&owner_col)),
        "{table}"
    );

    // A new template: revision 2 with its change-cause.
    set_image(s, resource, "busybox:2");
    rolled_to(s, app, replicas, "busybox:2");
    wait_for(s, 30, "revision 2", || {
        (numbered_images(s, app) == [(1, "busybox:1".into()), (2, "busybox:2".into())])
            .then_some(())
    });
    let hist = ok(s, &["rollout", "history", resource]);
    assert!(hist.contains("REVISION"), "{hist}");
    for line in ["1         image busybox:1", "2         image busybox:2"] {
        assert!(hist.contains(line), "{hist}");
    }
    let one = ok(s, &["rollout", "history", resource, "--revision=1"]);
    assert!(
        one.contains("busybox:1") && !one.contains("busybox:2"),
        "{one}"
    );

    // Undo: back to busybox:1, revision 1 renumbered as 3.
    let undo = ok(s, &["rollout", "undo", resource]);
    assert!(undo.contains("rolled back"), "{undo}");
    rolled_to(s, app, replicas, "busybox:1");
    wait_for(s, 30, "revision 1 renumbered as 3", || {
        (numbered_images(s, app) == [(2, "busybox:2".into()), (3, "busybox:1".into())])
            .then_some(())
    });
    let revs = revisions(s, app);
    assert_eq!(revs[1]["metadata"]["name"], rev_name, "{revs:?}");
    let hist = ok(s, &["rollout", "history", resource]);
    assert!(hist.contains("3         image busybox:1"), "{hist}");
    // Undo to a given revision.
    ok(s, &["rollout", "undo", resource, "--to-revision=2"]);
    rolled_to(s, app, replicas, "busybox:2");

    // revisionHistoryLimit 2: after more templates, the unused oldest revisions go.
    for image in ["busybox:3", "busybox:4", "busybox:5"] {
        set_image(s, resource, image);
        rolled_to(s, app, replicas, image);
    }
    let got = wait_for(s, 30, "old revisions trimmed to the limit", || {
        let got = numbered_images(s, app);
        (got.len() == 3).then_some(got)
    });
    assert_eq!(
        got,
        [
            (5, "busybox:3".into()),
            (6, "busybox:4".into()),
            (7, "busybox:5".into())
        ]
    );
}
