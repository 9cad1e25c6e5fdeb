//! Metadata-only clients against `capstan server`: kube-rs' `get_metadata`, `list_metadata`,
//! `patch_metadata` and `metadata_watcher` (which ask for
//! `application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`) get upstream's
//! `PartialObjectMetadata` / `PartialObjectMetadataList` shapes (checked on the raw bodies
//! with curl too, v1 and v1beta1), watch events carry `PartialObjectMetadata` objects, and
//! conversions upstream refuses are its 406 `NotAcceptable`.

use std::process::Command;
use std::time::Duration;

use e2e::ServerProcess;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
#[allow(deprecated)]
use kube::runtime::metadata_watcher;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config};
use serde_json::{Value, json};
use tokio::time::timeout;
use tokio_stream::StreamExt;

const STEP: Duration = Duration::from_secs(30);
const NS: &str = "default";

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config from the admin kubeconfig");
    Client::try_from(config).expect("kube client")
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([("app".to_owned(), "meta".to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("big".to_owned(), "x".repeat(64))].into()),
        ..ConfigMap::default()
    }
}

/// One raw request with the admin's client certificate: (status code, body).
fn curl(s: &ServerProcess, method: &str, path: &str, accept: &str, body: &str) -> (u16, String) {
    let pki = s.data_dir.join("pki");
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-X", method, "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(["-A", "e2e-test", "-w", "\n%{http_code}"]);
    if !accept.is_empty() {
        cmd.args(["-H", &format!("Accept: {accept}")]);
    }
    if !body.is_empty() {
        cmd.args([
            "-H",
            "Content-Type: application/merge-patch+json",
            "--data-binary",
            body,
        ]);
    }
    let out = cmd
        .arg(format!("{}{path}", s.url))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("status code line");
    (code.trim().parse().expect("status code"), body.to_owned())
}

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("JSON body ({e}): {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_metadata_calls_get_partial_object_metadata() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let client = client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, NS);
    for name in ["m1", "m2"] {
        timeout(STEP, cms.create(&PostParams::default(), &config_map(name)))
            .await
            .expect("create in time")
            .expect("create");
    }

    // get_metadata
    let one = timeout(STEP, cms.get_metadata("m1"))
        .await
        .expect("in time")
        .expect("get_metadata");
    let types = one.types.as_ref().expect("typed");
    assert_eq!(types.kind, "PartialObjectMetadata");
    assert_eq!(types.api_version, "meta.k8s.io/v1");
    assert_eq!(one.metadata.name.as_deref(), Some("m1"));
    assert_eq!(
        one.metadata.labels.as_ref().and_then(|l| l.get("app")),
        Some(&"meta".to_owned())
    );

    // list_metadata
    let list = timeout(
        STEP,
        cms.list_metadata(&ListParams::default().labels("app=meta")),
    )
    .await
    .expect("in time")
    .expect("list_metadata");
    assert_eq!(list.types.kind, "PartialObjectMetadataList");
    assert_eq!(list.types.api_version, "meta.k8s.io/v1");
    let names: Vec<_> = list
        .items
        .iter()
        .map(|i| i.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["m1", "m2"]);
    assert!(list.metadata.resource_version.is_some());

    // patch_metadata
    let patch = json!({"metadata": {"annotations": {"patched": "yes"}}});
    let patched = timeout(
        STEP,
        cms.patch_metadata("m2", &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await
    .expect("in time")
    .expect("patch_metadata");
    assert_eq!(
        patched.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(
        patched
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("patched")),
        Some(&"yes".to_owned())
    );
    // The patch reached the object itself.
    let full = cms.get("m2").await.expect("get");
    assert_eq!(full.data.as_ref().map(|d| d["big"].len()), Some(64));

    // metadata_watcher (deprecated in kube 5 for `watcher` over `Api<PartialObjectMeta<K>>`,
    // which sends the same requests): the initial list, then a live change.
    #[allow(deprecated)]
    let mut stream = Box::pin(
        metadata_watcher(cms.clone(), watcher::Config::default().labels("app=meta"))
            .default_backoff()
            .applied_objects(),
    );
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let obj = timeout(STEP, stream.next())
            .await
            .expect("initial event in time")
            .expect("stream continues")
            .expect("no watcher error");
        seen.push(obj.metadata.name.clone().unwrap_or_default());
    }
    seen.sort();
    assert_eq!(seen, ["m1", "m2"]);
    timeout(STEP, cms.create(&PostParams::default(), &config_map("m3")))
        .await
        .expect("create in time")
        .expect("create m3");
    let live = loop {
        let obj = timeout(STEP, stream.next())
            .await
            .expect("live event in time")
            .expect("stream continues")
            .expect("no watcher error");
        if obj.metadata.name.as_deref() == Some("m3") {
            break obj;
        }
    };
    assert_eq!(
        live.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
}

#[test]
fn raw_shapes_and_not_acceptable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let (ok, _, err) = server
        .kubectl(&["create", "configmap", "c1", "--from-literal=k=v"])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let many = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let path = "/api/v1/namespaces/default/configmaps";

    // GET: only kind, apiVersion and metadata.
    let (code, body) = curl(&server, "GET", &format!("{path}/c1"), one, "");
    assert_eq!(code, 200, "{body}");
    assert!(body.ends_with('\n'), "newline-terminated: {body:?}");
    let v = parse(&body);
    let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["apiVersion", "kind", "metadata"], "{body}");
    assert_eq!(v["kind"], "PartialObjectMetadata");
    assert_eq!(v["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(v["metadata"]["name"], "c1");
    assert!(v["metadata"]["uid"].is_string());
    assert!(
        v["metadata"]["managedFields"].is_array(),
        "whole metadata: {body}"
    );

    // v1beta1 as well.
    let beta = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
    let (code, body) = curl(&server, "GET", &format!("{path}/c1"), beta, "");
    assert_eq!(code, 200, "{body}");
    assert_eq!(parse(&body)["apiVersion"], "meta.k8s.io/v1beta1");

    // LIST: the list and each item are metadata only.
    let (code, body) = curl(&server, "GET", path, many, "");
    assert_eq!(code, 200, "{body}");
    let v = parse(&body);
    assert_eq!(v["kind"], "PartialObjectMetadataList");
    assert_eq!(v["apiVersion"], "meta.k8s.io/v1");
    assert!(v["metadata"]["resourceVersion"].is_string(), "{body}");
    let item = &v["items"][0];
    assert_eq!(item["kind"], "PartialObjectMetadata");
    assert_eq!(item["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(item["metadata"]["name"], "c1");
    assert!(item.get("data").is_none(), "{body}");
    // A paged list keeps its continue token.
    let (code, body) = curl(&server, "GET", &format!("{path}?limit=1"), many, "");
    assert_eq!(code, 200, "{body}");
    // An empty list has null items, as Go's nil slice.
    let (code, body) = curl(
        &server,
        "GET",
        "/api/v1/namespaces/kube-public/secrets",
        many,
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(parse(&body)["items"], Value::Null, "{body}");

    // PATCH answers metadata only.
    let (code, body) = curl(
        &server,
        "PATCH",
        &format!("{path}/c1"),
        one,
        r#"{"metadata":{"labels":{"x":"y"}}}"#,
    );
    assert_eq!(code, 200, "{body}");
    let v = parse(&body);
    assert_eq!(v["kind"], "PartialObjectMetadata");
    assert_eq!(v["metadata"]["labels"]["x"], "y");

    // Upstream's 406s: a list asked as one object, one object as a list, unknown kinds.
    let (code, body) = curl(&server, "GET", path, one, "");
    assert_eq!(code, 406, "{body}");
    let v = parse(&body);
    assert_eq!(v["reason"], "NotAcceptable");
    assert_eq!(
        v["message"],
        "you requested PartialObjectMetadata, but the requested object is a list (*core.ConfigMapList)"
    );
    let (code, body) = curl(&server, "GET", &format!("{path}/c1"), many, "");
    assert_eq!(code, 406, "{body}");
    assert_eq!(
        parse(&body)["message"],
        "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)"
    );
    let (code, body) = curl(
        &server,
        "GET",
        path,
        "application/json;as=Foo;g=meta.k8s.io;v=v1",
        "",
    );
    assert_eq!(code, 406, "{body}");
    assert_eq!(
        parse(&body)["message"],
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );
    // Errors are never converted: a 404 asked as metadata is a Status.
    let (code, body) = curl(&server, "GET", &format!("{path}/missing"), one, "");
    assert_eq!(code, 404, "{body}");
    assert_eq!(parse(&body)["kind"], "Status");

    // A watch's events carry PartialObjectMetadata objects.
    let (code, body) = curl(
        &server,
        "GET",
        &format!("{path}?watch=true&timeoutSeconds=1"),
        one,
        "",
    );
    assert_eq!(code, 200, "{body}");
    let first = body.lines().next().expect("an event");
    let ev = parse(first);
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["kind"], "PartialObjectMetadata", "{first}");
    assert_eq!(ev["object"]["metadata"]["name"], "c1");
    assert!(ev["object"].get("data").is_none(), "{first}");

    // A Table on a verb other than get/list: a patch answered as a one-row Table.
    let (code, body) = curl(
        &server,
        "PATCH",
        &format!("{path}/c1"),
        "application/json;as=Table;g=meta.k8s.io;v=v1",
        r#"{"metadata":{"labels":{"z":"1"}}}"#,
    );
    assert_eq!(code, 200, "{body}");
    let v = parse(&body);
    assert_eq!(v["kind"], "Table");
    assert_eq!(v["rows"][0]["object"]["metadata"]["name"], "c1", "{body}");
}
