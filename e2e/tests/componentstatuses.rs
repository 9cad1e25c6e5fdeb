//! `componentstatuses` (deprecated core/v1, still served by v1.33) with stock kubectl: on the
//! whole control plane `kubectl get cs` prints upstream's columns with the controller
//! manager, the scheduler and the store healthy, and kubectl shows the deprecation warning;
//! on a bare server (no scheduler, no controller manager) those two are Unhealthy with the
//! reason, the store healthy; get by name, 404 for unknown names, 405 for writes; discovery
//! lists the resource with its short name and OpenAPI documents it (`kubectl explain`).

use e2e::ServerProcess;
use e2e::cli::{cluster, json, ok, wait_for};

const WARNING: &str = "Warning: v1 ComponentStatus is deprecated in v1.19+";

fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default()
}

#[test]
fn kubectl_get_cs_reports_the_embedded_components() {
    let (_dir, s) = cluster();
    // The components are healthy once each holds its leader Lease.
    let table = wait_for(&s, 60, "every component Healthy", || {
        let (ok, out, _) = s.kubectl(&["get", "componentstatuses"]).ok()?;
        (ok && ["controller-manager", "scheduler", "etcd-0"]
            .iter()
            .all(|n| row(&out, n).get(1) == Some(&"Healthy")))
        .then_some(out)
    });
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "STATUS", "MESSAGE", "ERROR"]);
    assert_eq!(row(&table, "scheduler"), ["scheduler", "Healthy", "ok"]);
    assert_eq!(row(&table, "etcd-0"), ["etcd-0", "Healthy", "ok"]);
    let (_, _, err) = s.kubectl(&["get", "cs"]).expect("kubectl");
    assert!(err.contains(WARNING), "{err}");

    let one = json(&s, &["get", "cs", "controller-manager", "-o", "json"]);
    assert_eq!(one["kind"], "ComponentStatus");
    assert_eq!(one["conditions"][0]["type"], "Healthy");
    assert_eq!(one["conditions"][0]["status"], "True");
    assert_eq!(one["conditions"][0]["message"], "ok");
    let list = json(&s, &["get", "--raw", "/api/v1/componentstatuses"]);
    assert_eq!(list["kind"], "ComponentStatusList");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(3));

    let resources = ok(&s, &["api-resources", "--api-group="]);
    let cs = row(&resources, "componentstatuses");
    assert_eq!(cs.get(1), Some(&"cs"), "{resources}");
}

#[test]
fn components_not_running_are_unhealthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let table = ok(&s, &["get", "cs"]);
    let scheduler = row(&table, "scheduler");
    assert_eq!(scheduler.get(1), Some(&"Unhealthy"), "{table}");
    assert!(
        table.contains("no leader Lease kube-system/kube-scheduler"),
        "{table}"
    );
    assert_eq!(row(&table, "controller-manager").get(1), Some(&"Unhealthy"));
    assert_eq!(row(&table, "etcd-0"), ["etcd-0", "Healthy", "ok"]);

    let (found, _, err) = s.kubectl(&["get", "cs", "nope"]).expect("kubectl");
    assert!(!found);
    assert!(
        err.contains("Error from server (NotFound): componentstatuses \"nope\" not found"),
        "{err}"
    );
    // Documented in OpenAPI as upstream documents it (list and read only).
    let explained = ok(&s, &["explain", "componentstatuses.conditions"]);
    assert!(
        explained.contains("KIND:       ComponentStatus"),
        "{explained}"
    );
    let (deleted, _, err) = s.kubectl(&["delete", "cs", "scheduler"]).expect("kubectl");
    assert!(!deleted);
    assert!(
        err.contains("MethodNotAllowed") || err.contains("not allowed"),
        "{err}"
    );
}
