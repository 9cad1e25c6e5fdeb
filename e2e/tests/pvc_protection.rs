//! PVC protection (issue 23): a new claim carries `kubernetes.io/pvc-protection` (the
//! `StorageObjectInUseProtection` admission plugin); `kubectl delete pvc` completes when no
//! pod uses the claim, and waits while a scheduled pod does, completing once the pod is gone
//! (the `persistentvolumeclaim-protection` controller). Volumes likewise carry
//! `kubernetes.io/pv-protection` and are removed once they are not `Bound` (the
//! `persistentvolume-protection` controller). The `persistentvolume-binder` controller binds
//! claims to volumes, asks external provisioners for volumes, and releases and reclaims
//! volumes whose claims are gone, with upstream's phases, annotations and events.

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

/// Polls `done` until it holds, failing after `limit`.
fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
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

    // A bound volume stays (terminating) until it is released: bound to a claim by the
    // `persistentvolume-binder` controller, released when the claim is deleted.
    create(&s, dir.path(), "bound.yaml", &volume("bound"));
    create(&s, dir.path(), "holder.yaml", &claim("holder"));
    wait_until("the volume bound", Duration::from_secs(20), || {
        get_volume(&s, "bound", "{.status.phase}").as_deref() == Some("Bound")
    });
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
    let (ok, _, err) = s
        .kubectl(&["delete", "pvc", "holder"])
        .expect("kubectl runs");
    assert!(ok, "kubectl delete pvc holder: {err}");
    wait_volume_gone(&s, "bound", Duration::from_secs(20));
}

/// A volume of `size`, access mode ReadWriteOnce, class `class` ("" for none), reclaim policy
/// `reclaim`, with `extra` YAML appended to its spec.
fn volume_of(name: &str, size: &str, class: &str, reclaim: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {name}\nspec:\n  \
         capacity:\n    storage: {size}\n  accessModes: [ReadWriteOnce]\n  \
         storageClassName: \"{class}\"\n  persistentVolumeReclaimPolicy: {reclaim}\n  \
         hostPath:\n    path: /tmp/{name}\n{extra}"
    )
}

/// A ReadWriteOnce claim of `size` and `class` (None: no `storageClassName`).
fn claim_of(name: &str, size: &str, class: Option<&str>) -> String {
    let class = class.map_or(String::new(), |c| format!("  storageClassName: \"{c}\"\n"));
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {name}\nspec:\n  \
         accessModes: [ReadWriteOnce]\n{class}  resources:\n    requests:\n      \
         storage: {size}\n"
    )
}

fn kubectl_ok(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(ok, "kubectl {args:?}: {err}");
    out
}

#[test]
fn claims_bind_to_volumes_and_volumes_are_reclaimed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_raw(&dir.path().join("data"), ARGS).expect("server starts");
    let phase = |name: &str| get_volume(&s, name, "{.status.phase}").unwrap_or_default();
    let claim_phase = |name: &str| get_claim(&s, name, "{.status.phase}").unwrap_or_default();

    // Static binding: the smallest volume of the claim's class that fits.
    create(
        &s,
        dir.path(),
        "small.yaml",
        &volume_of("small", "1Gi", "", "Retain", ""),
    );
    create(
        &s,
        dir.path(),
        "big.yaml",
        &volume_of("big", "5Gi", "", "Delete", ""),
    );
    create(
        &s,
        dir.path(),
        "fast.yaml",
        &volume_of("fast-1", "1Gi", "fast", "Retain", ""),
    );
    wait_until("volumes available", Duration::from_secs(20), || {
        ["small", "big", "fast-1"]
            .iter()
            .all(|v| phase(v) == "Available")
    });
    assert!(
        !get_volume(&s, "small", "{.status.lastPhaseTransitionTime}")
            .unwrap_or_default()
            .is_empty(),
        "a phase change is stamped"
    );
    create(
        &s,
        dir.path(),
        "data.yaml",
        &claim_of("data", "500Mi", None),
    );
    wait_until("claim data bound", Duration::from_secs(20), || {
        claim_phase("data") == "Bound" && phase("small") == "Bound"
    });
    let out = kubectl_ok(&s, &["get", "pvc", "data", "--no-headers"]);
    let cols: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        &cols[..5],
        ["data", "Bound", "small", "1Gi", "RWO"],
        "{out}"
    );
    let out = kubectl_ok(&s, &["get", "pv", "small", "--no-headers"]);
    assert!(
        out.contains("Retain") && out.contains("Bound") && out.contains("default/data"),
        "{out}"
    );
    assert_eq!(
        get_claim(
            &s,
            "data",
            r#"{.metadata.annotations.pv\.kubernetes\.io/bind-completed} {.metadata.annotations.pv\.kubernetes\.io/bound-by-controller}"#
        )
        .as_deref(),
        Some("yes yes")
    );
    assert_eq!(
        get_volume(
            &s,
            "small",
            "{.spec.claimRef.kind} {.spec.claimRef.namespace}/{.spec.claimRef.name}"
        )
        .as_deref(),
        Some("PersistentVolumeClaim default/data")
    );

    // No volume fits and no class: Pending, with upstream's event.
    create(
        &s,
        dir.path(),
        "huge.yaml",
        &claim_of("huge", "100Gi", Some("")),
    );
    wait_until("the FailedBinding event", Duration::from_secs(20), || {
        kubectl_ok(&s, &["describe", "pvc", "huge"])
            .contains("no persistent volumes available for this claim and no storage class is set")
    });
    assert_eq!(claim_phase("huge"), "Pending");

    // A class with an external provisioner: the claim is handed to it; the volume it makes,
    // pre-bound to the claim, is bound.
    create(
        &s,
        dir.path(),
        "class.yaml",
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: ext\n\
         provisioner: example.com/ext\nreclaimPolicy: Delete\n",
    );
    create(
        &s,
        dir.path(),
        "ext.yaml",
        &claim_of("ext", "1Gi", Some("ext")),
    );
    wait_until(
        "the provisioner annotation",
        Duration::from_secs(20),
        || {
            get_claim(
                &s,
                "ext",
                r#"{.metadata.annotations.volume\.kubernetes\.io/storage-provisioner}"#,
            )
            .as_deref()
                == Some("example.com/ext")
        },
    );
    wait_until(
        "the ExternalProvisioning event",
        Duration::from_secs(20),
        || {
            kubectl_ok(&s, &["describe", "pvc", "ext"]).contains(
            "Waiting for a volume to be created either by the external provisioner 'example.com/ext'",
        )
        },
    );
    let uid = get_claim(&s, "ext", "{.metadata.uid}").unwrap_or_default();
    let provisioned = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: pvc-{uid}\n  annotations:\n    \
         pv.kubernetes.io/provisioned-by: example.com/ext\nspec:\n  capacity:\n    storage: 1Gi\n  \
         accessModes: [ReadWriteOnce]\n  storageClassName: ext\n  \
         persistentVolumeReclaimPolicy: Delete\n  claimRef:\n    namespace: default\n    \
         name: ext\n    uid: {uid}\n  csi:\n    driver: example.com/ext\n    volumeHandle: h1\n"
    );
    create(&s, dir.path(), "provisioned.yaml", &provisioned);
    let pv_name = format!("pvc-{uid}");
    wait_until("claim ext bound", Duration::from_secs(20), || {
        claim_phase("ext") == "Bound" && phase(&pv_name) == "Bound"
    });
    assert_eq!(
        get_claim(&s, "ext", "{.spec.volumeName}"),
        Some(pv_name.clone())
    );

    // Claims deleted: Retain keeps the volume Released; Delete of a provisioned volume is
    // left to its provisioner (Released); Delete of a static volume finds no plugin (Failed).
    create(
        &s,
        dir.path(),
        "big-claim.yaml",
        &claim_of("big-claim", "3Gi", None),
    );
    wait_until("claim big-claim bound", Duration::from_secs(20), || {
        claim_phase("big-claim") == "Bound" && phase("big") == "Bound"
    });
    kubectl_ok(&s, &["delete", "pvc", "data", "ext", "big-claim"]);
    wait_until("volumes reclaimed", Duration::from_secs(20), || {
        phase("small") == "Released" && phase(&pv_name) == "Released" && phase("big") == "Failed"
    });
    assert_eq!(
        get_volume(&s, "big", "{.status.message}").as_deref(),
        Some(
            r#"error getting deleter volume plugin for volume "big": no deletable volume plugin matched"#
        )
    );
    // A released volume is not bound again (its claimRef stays until an administrator
    // clears it).
    create(
        &s,
        dir.path(),
        "again.yaml",
        &claim_of("again", "1Gi", None),
    );
    wait_until(
        "the FailedBinding event for again",
        Duration::from_secs(20),
        || kubectl_ok(&s, &["describe", "pvc", "again"]).contains("FailedBinding"),
    );
    assert_eq!(phase("small"), "Released");
    // Clearing it makes it Available, and the waiting claim binds.
    kubectl_ok(
        &s,
        &[
            "patch",
            "pv",
            "small",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/claimRef"}]"#,
        ],
    );
    wait_until("claim again bound", Duration::from_secs(20), || {
        claim_phase("again") == "Bound"
            && get_claim(&s, "again", "{.spec.volumeName}").as_deref() == Some("small")
    });
}
