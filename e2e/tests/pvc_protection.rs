//! PVC protection (issue 23): a new claim carries `kubernetes.io/pvc-protection` (the
//! `StorageObjectInUseProtection` admission plugin); `kubectl delete pvc` completes when no
//! pod uses the claim, and waits while a scheduled pod does, completing once the pod is gone
//! (the `persistentvolumeclaim-protection` controller). Volumes likewise carry
//! `kubernetes.io/pv-protection` and are removed once they are not `Bound` (the
//! `persistentvolume-protection` controller).

use std::time::{Duration, Instant};

use e2e::ServerProcess;

/// A control plane without nodes or scheduler, with the controller manager.
const ARGS: &[&str] = &[
    "--nodes=0",
    "--control-plane-pods=false",
    "--disable-scheduler",
    "--disable-admission-plugins=ServiceAccount",
];

fn claim(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {name}\nspec:\n  \
         accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n"
    )
}

fn create(s: &ServerProcess, dir: &std::path::Path, file: &str, yaml: &str) {
    let path = dir.join(file);
    std::fs::write(&path, yaml).expect("write manifest");
    let (ok, _, err) = s
        .kubectl(&["create", "-f", &path.to_string_lossy()])
        .expect("kubectl runs");
    assert!(ok, "kubectl create {file}: {err}");
}

/// `kubectl get pvc <name> -o jsonpath=<path>`: None once the claim is gone.
fn get_claim(s: &ServerProcess, name: &str, path: &str) -> Option<String> {
    let (ok, out, err) = s
        .kubectl(&["get", "pvc", name, "-o", &format!("jsonpath={path}")])
        .expect("kubectl runs");
    if !ok {
        assert!(
            err.contains("NotFound") || err.contains("not found"),
            "{err}"
        );
        return None;
    }
    Some(out)
}

fn wait_gone(s: &ServerProcess, name: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while get_claim(s, name, "{.metadata.name}").is_some() {
        assert!(Instant::now() < deadline, "pvc {name} was never removed");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn claims_are_protected_while_a_pod_uses_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_raw(&dir.path().join("data"), ARGS).expect("server starts");

    // An unused claim: the finalizer is there, and the delete completes.
    create(&s, dir.path(), "free.yaml", &claim("free"));
    assert_eq!(
        get_claim(&s, "free", "{.metadata.finalizers}").as_deref(),
        Some(r#"["kubernetes.io/pvc-protection"]"#)
    );
    let (ok, _, err) = s
        .kubectl(&["delete", "pvc", "free", "--timeout=30s"])
        .expect("kubectl runs");
    assert!(ok, "kubectl delete pvc free: {err}");
    wait_gone(&s, "free", Duration::from_secs(5));

    // A claim a scheduled pod mounts stays (terminating) until the pod is gone.
    create(&s, dir.path(), "used.yaml", &claim("used"));
    create(
        &s,
        dir.path(),
        "node.yaml",
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: worker\n",
    );
    create(
        &s,
        dir.path(),
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: user\nspec:\n  nodeName: worker\n  \
         containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - name: data\n      \
         mountPath: /data\n  volumes:\n  - name: data\n    persistentVolumeClaim:\n      \
         claimName: used\n",
    );
    let (ok, _, err) = s
        .kubectl(&["delete", "pvc", "used", "--wait=false"])
        .expect("kubectl runs");
    assert!(ok, "kubectl delete pvc used: {err}");
    // While the pod exists the claim is terminating and keeps its finalizer: checked for a
    // while (the controller has seen the delete: a claim it may free is gone within 5 s above).
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let deleting = get_claim(&s, "used", "{.metadata.deletionTimestamp}");
        assert!(
            deleting.as_deref().is_some_and(|t| !t.is_empty()),
            "the used claim went away while its pod exists: {deleting:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let (ok, _, err) = s
        .kubectl(&["delete", "pod", "user", "--grace-period=0", "--force"])
        .expect("kubectl runs");
    assert!(ok, "kubectl delete pod user: {err}");
    wait_gone(&s, "used", Duration::from_secs(20));
}

fn volume(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {name}\nspec:\n  \
         capacity:\n    storage: 1Gi\n  accessModes: [ReadWriteOnce]\n  hostPath:\n    \
         path: /tmp/{name}\n"
    )
}

/// `kubectl get pv <name> -o jsonpath=<path>`: None once the volume is gone.
fn get_volume(s: &ServerProcess, name: &str, path: &str) -> Option<String> {
    let (ok, out, err) = s
        .kubectl(&["get", "pv", name, "-o", &format!("jsonpath={path}")])
        .expect("kubectl runs");
    if !ok {
        assert!(
            err.contains("NotFound") || err.contains("not found"),
            "{err}"
        );
        return None;
    }
    Some(out)
}

fn wait_volume_gone(s: &ServerProcess, name: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while get_volume(s, name, "{.metadata.name}").is_some() {
        assert!(Instant::now() < deadline, "pv {name} was never removed");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sets a volume's `status.phase` through the status subresource (what the PV controller
/// writes).
fn set_phase(s: &ServerProcess, name: &str, phase: &str) {
    let patch = format!(r#"{{"status":{{"phase":"{phase}"}}}}"#);
    let (ok, _, err) = s
        .kubectl(&[
            "patch",
            "pv",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ])
        .expect("kubectl runs");
    assert!(ok, "kubectl patch pv {name} status: {err}");
}

#[test]
fn volumes_are_protected_while_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_raw(&dir.path().join("data"), ARGS).expect("server starts");

    // A volume that is not bound: the finalizer is there, and the delete completes.
    create(&s, dir.path(), "free.yaml", &volume("free"));
    assert_eq!(
        get_volume(&s, "free", "{.metadata.finalizers}").as_deref(),
        Some(r#"["kubernetes.io/pv-protection"]"#)
    );
    let (ok, _, err) = s
        .kubectl(&["delete", "pv", "free", "--timeout=30s"])
        .expect("kubectl runs");
    assert!(ok, "kubectl delete pv free: {err}");
    wait_volume_gone(&s, "free", Duration::from_secs(5));

    // A bound volume stays (terminating) until it is released.
    create(&s, dir.path(), "bound.yaml", &volume("bound"));
    set_phase(&s, "bound", "Bound");
    let (ok, _, err) = s
        .kubectl(&["delete", "pv", "bound", "--wait=false"])
        .expect("kubectl runs");
    assert!(ok, "kubectl delete pv bound: {err}");
    // Checked for a while: the controller has seen the delete (a volume it may free is gone
    // within 5 s above).
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let deleting = get_volume(&s, "bound", "{.metadata.deletionTimestamp}");
        assert!(
            deleting.as_deref().is_some_and(|t| !t.is_empty()),
            "the bound volume went away: {deleting:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    set_phase(&s, "bound", "Released");
    wait_volume_gone(&s, "bound", Duration::from_secs(20));
}
