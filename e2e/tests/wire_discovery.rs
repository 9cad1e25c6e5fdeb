//! Discovery documents byte for byte as kube-apiserver writes them (raw bodies via curl):
//! `APIResource` entries in Go's struct order with `categories` and upstream's
//! `storageVersionHash` (base64 of the first 8 bytes of SHA-256 of the storage
//! `group/version/kind`: the values below are kube-apiserver's own), none on subresources;
//! `APIGroup`, `APIGroupList`, aggregated v2 (`categories`, struct order, no hash); a custom
//! resource's hash follows its CRD's storage version; every document ends with a newline.

use std::process::Command;
use std::time::{Duration, Instant};

use e2e::ServerProcess;

fn curl(s: &ServerProcess, path: &str, accept: &str) -> String {
    let pki = s.data_dir.join("pki");
    let out = Command::new("curl")
        .args(["-s", "--fail", "-A", "e2e", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(["-H", &format!("Accept: {accept}")])
        .arg(format!("{}{path}", s.url))
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "curl {path}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn legacy_and_aggregated_documents_as_upstream_writes_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");

    // No apiVersion: upstream writes the core group's documents through its
    // stripVersionEncoder (`keepUnversioned("")`), as `/api`.
    let core = curl(&s, "/api/v1", "application/json");
    assert!(
        core.starts_with(r#"{"kind":"APIResourceList","groupVersion":"v1","resources":["#),
        "{core}"
    );
    assert!(core.ends_with("]}\n"), "{core:?}");
    for entry in [
        r#"{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["po"],"categories":["all"],"storageVersionHash":"xPOwRZ+Yhw8="}"#,
        r#"{"name":"pods/status","singularName":"","namespaced":true,"kind":"Pod","verbs":["get","patch","update"]}"#,
        r#"{"name":"services","singularName":"service","namespaced":true,"kind":"Service","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["svc"],"categories":["all"],"storageVersionHash":"0/CO1lhkEBI="}"#,
        r#"{"name":"nodes","singularName":"node","namespaced":false,"kind":"Node","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["no"],"storageVersionHash":"XwShjMxG9Fs="}"#,
        r#""storageVersionHash":"r2yiGXH7wu8="}"#,
    ] {
        assert!(core.contains(entry), "missing {entry} in {core}");
    }

    let apps = curl(&s, "/apis/apps/v1", "application/json");
    let deployments = r#"{"name":"deployments","singularName":"deployment","namespaced":true,"kind":"Deployment","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["deploy"],"categories":["all"],"storageVersionHash":"8aSe+NMegvE="}"#;
    assert!(apps.contains(deployments), "{apps}");
    // The scale subresource names its own group and version only when they differ.
    assert!(
        apps.contains(r#"{"name":"deployments/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1","kind":"Scale","verbs":["get","patch","update"]}"#),
        "{apps}"
    );

    // events.k8s.io events are stored as core v1 Events: the same hash.
    let events = curl(&s, "/apis/events.k8s.io/v1", "application/json");
    assert!(
        events.contains(r#""kind":"Event","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["ev"],"storageVersionHash":"r2yiGXH7wu8="}"#),
        "{events}"
    );

    assert_eq!(
        curl(&s, "/apis/apps", "application/json"),
        "{\"kind\":\"APIGroup\",\"apiVersion\":\"v1\",\"name\":\"apps\",\"versions\":[{\"groupVersion\":\"apps/v1\",\"version\":\"v1\"}],\"preferredVersion\":{\"groupVersion\":\"apps/v1\",\"version\":\"v1\"}}\n"
    );
    let groups = curl(&s, "/apis", "application/json");
    assert!(
        groups.starts_with(r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"#),
        "{groups}"
    );
    let versions = curl(&s, "/api", "application/json");
    assert!(
        versions.starts_with(r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"#),
        "{versions}"
    );

    // Aggregated v2: struct order, categories, no storageVersionHash.
    let aggregated = curl(
        &s,
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    );
    assert!(
        aggregated.starts_with(r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"name":"#),
        "{aggregated}"
    );
    assert!(
        aggregated.contains(r#"{"resource":"deployments","responseKind":{"group":"apps","version":"v1","kind":"Deployment"},"scope":"Namespaced","singularResource":"deployment","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["deploy"],"categories":["all"],"subresources":[{"subresource":"scale","responseKind":{"group":"autoscaling","version":"v1","kind":"Scale"},"verbs":["get","patch","update"]}"#),
        "{aggregated}"
    );
    assert!(!aggregated.contains("storageVersionHash"));
    let aggregated_core = curl(
        &s,
        "/api",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    );
    assert!(
        aggregated_core.contains(r#"{"resource":"replicationcontrollers","responseKind":{"group":"","version":"v1","kind":"ReplicationController"},"scope":"Namespaced","singularResource":"replicationcontroller","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["rc"],"categories":["all"]"#),
        "{aggregated_core}"
    );
    for (group_version, resource) in [
        ("/apis/apps/v1", "statefulsets"),
        ("/apis/apps/v1", "daemonsets"),
        ("/apis/apps/v1", "replicasets"),
        ("/apis/batch/v1", "jobs"),
        ("/apis/batch/v1", "cronjobs"),
        ("/apis/autoscaling/v2", "horizontalpodautoscalers"),
        ("/apis/autoscaling/v1", "horizontalpodautoscalers"),
    ] {
        let doc = curl(&s, group_version, "application/json");
        let entry = doc
            .split(r#"{"name":""#)
            .find(|e| e.starts_with(&format!("{resource}\"")))
            .unwrap_or_else(|| panic!("{resource} in {doc}"));
        assert!(entry.contains(r#""categories":["all"]"#), "{entry}");
    }
    // autoscaling/v1 HPAs are stored as autoscaling/v2 ones.
    let v1 = curl(&s, "/apis/autoscaling/v1", "application/json");
    let v2 = curl(&s, "/apis/autoscaling/v2", "application/json");
    let hash = |doc: &str| {
        doc.split("\"storageVersionHash\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(str::to_owned)
    };
    assert!(hash(&v1).is_some());
    assert_eq!(hash(&v1), hash(&v2));
}

#[test]
fn a_custom_resource_hash_follows_its_storage_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let crd = r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
      "metadata": {"name": "widgets.wire.example.com"},
      "spec": {"group": "wire.example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                  "categories": ["all", "gadgets"]},
        "versions": [
          {"name": "v1", "served": true, "storage": true,
           "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
          {"name": "v2", "served": true, "storage": false,
           "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}"#;
    let file = dir.path().join("crd.json");
    std::fs::write(&file, crd).expect("write CRD");
    let (ok, _, err) = s
        .kubectl(&["create", "-f", &file.to_string_lossy()])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let (v1, v2) = loop {
        let (ok1, v1, _) = s
            .kubectl(&["get", "--raw", "/apis/wire.example.com/v1"])
            .expect("kubectl");
        let (ok2, v2, _) = s
            .kubectl(&["get", "--raw", "/apis/wire.example.com/v2"])
            .expect("kubectl");
        if ok1 && ok2 && v1.contains("widgets") && v2.contains("widgets") {
            break (v1, v2);
        }
        assert!(Instant::now() < deadline, "CRD not served: {v1} {v2}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // base64(sha256("wire.example.com/v1/Widget")[:8]), on both served versions.
    let want = r#""categories":["all","gadgets"],"storageVersionHash":"Hfc5J9Bq2p4="}"#;
    assert!(v1.contains(want), "{v1}");
    assert!(v2.contains(want), "{v2}");
}
