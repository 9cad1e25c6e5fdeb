//! A kube-rs operator's view of CustomResourceDefinitions: a `#[derive(CustomResource)]`
//! type's CRD is created from `crd()`, becomes Established (`await_condition`), and its
//! objects are created, read, listed, patched (status included), watched (`watcher`) and
//! deleted with the typed API, against the real binary.

use std::time::Duration;

use e2e::ServerProcess;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::time::timeout;

const STEP: Duration = Duration::from_secs(30);

/// The spec of a Gizmo, as an operator would declare it.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "kube.example.com",
    version = "v1",
    kind = "Gizmo",
    namespaced,
    status = "GizmoStatus",
    shortname = "gz",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#
)]
pub struct GizmoSpec {
    /// How big.
    pub size: i32,
    /// A label.
    pub label: String,
}

/// What the operator reports.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
pub struct GizmoStatus {
    /// Whether it is ready.
    pub ready: bool,
}

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    Client::try_from(config).expect("kube client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_derived_custom_resource_is_served_to_kube_rs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let client = client(&server).await;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Gizmo::crd())
        .await
        .expect("create the CRD");
    let established = await_condition(
        crds.clone(),
        "gizmos.kube.example.com",
        conditions::is_crd_established(),
    );
    timeout(STEP, established)
        .await
        .expect("Established in time")
        .expect("await_condition");

    let gizmos: Api<Gizmo> = Api::namespaced(client.clone(), "default");
    // A watcher started before the objects exist sees them arrive.
    let events = watcher(gizmos.clone(), watcher::Config::default())
        .applied_objects()
        .map_ok(|g: Gizmo| (g.name_any(), g.spec.size))
        .take(2);
    let collected = tokio::spawn(async move { events.try_collect::<Vec<_>>().await });

    let mut g = Gizmo::new(
        "g1",
        GizmoSpec {
            size: 2,
            label: "first".into(),
        },
    );
    let created = gizmos
        .create(&PostParams::default(), &g)
        .await
        .expect("create a Gizmo");
    assert_eq!(created.spec, g.spec);
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.generation, Some(1));

    g.spec.size = 5;
    let patched = gizmos
        .patch(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": { "size": 5 } })),
        )
        .await
        .expect("patch the spec");
    assert_eq!(patched.spec.size, 5);
    assert_eq!(patched.metadata.generation, Some(2));

    let with_status = gizmos
        .patch_status(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "ready": true } })),
        )
        .await
        .expect("patch the status");
    assert_eq!(with_status.status, Some(GizmoStatus { ready: true }));
    assert_eq!(with_status.metadata.generation, Some(2));

    // Server-side apply of a typed object, as controllers reconcile.
    let applied = gizmos
        .patch(
            "g2",
            &PatchParams::apply("gizmo-operator").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "kube.example.com/v1",
                "kind": "Gizmo",
                "metadata": { "name": "g2" },
                "spec": { "size": 7, "label": "applied" }
            })),
        )
        .await
        .expect("server-side apply");
    assert_eq!(applied.spec.size, 7);

    let seen = timeout(STEP, collected)
        .await
        .expect("watch in time")
        .expect("watch task")
        .expect("watch stream");
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"g1"), "{seen:?}");

    let list = gizmos.list(&ListParams::default()).await.expect("list");
    let mut names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
    names.sort();
    assert_eq!(names, ["g1", "g2"]);
    let got = gizmos.get("g1").await.expect("get");
    assert_eq!(got.spec.size, 5);
    assert_eq!(got.status, Some(GizmoStatus { ready: true }));

    gizmos
        .delete("g1", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(gizmos.get_opt("g1").await.expect("get_opt").is_none());

    // Deleting the CRD takes its objects with it.
    crds.delete("gizmos.kube.example.com", &DeleteParams::default())
        .await
        .expect("delete the CRD");
    let gone = await_condition(
        crds.clone(),
        "gizmos.kube.example.com",
        conditions::is_deleted(""),
    );
    timeout(STEP, gone)
        .await
        .expect("CRD gone in time")
        .expect("await deletion");
}
