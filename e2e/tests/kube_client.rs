//! kube-rs as an ordinary client of `capstan server`: reads at a resourceVersion the server
//! has not reached wait for it (and succeed once a write gets there), or end in upstream's
//! 504 `Timeout` with the `ResourceVersionTooLarge` cause; DELETE answers parse as kube-rs
//! expects (the object for pods, a `Status` for other kinds); kube-rs' watcher in
//! streaming-list mode (`sendInitialEvents`, bookmarks) gets the initial state, then live events.

use std::time::Duration;

use e2e::ServerProcess;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, VersionMatch};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::time::timeout;

const STEP: Duration = Duration::from_secs(30);

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config from the admin kubeconfig");
    // kube-rs retries 504s by default (as client-go honours Retry-After); the test wants
    // to see the first answer.
    config.default_retry = false;
    Client::try_from(config).expect("kube client")
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_at_future_resource_versions_wait_then_time_out_with_504() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let client = client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let list = timeout(STEP, cms.list(&ListParams::default()))
        .await
        .expect("list in time")
        .expect("list");
    let now: i64 = list
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("list resourceVersion");

    // One revision ahead: the read waits until a write reaches it. The server writes in the
    // background too (leases, APIService conditions), so the revision it waits for need not be
    // ours: it must not answer older than `ahead`, and must show `c1` once at its revision.
    let ahead = (now + 1).to_string();
    let params = ListParams::default()
        .at(&ahead)
        .matching(VersionMatch::NotOlderThan);
    let waiting = {
        let cms = cms.clone();
        let params = params.clone();
        tokio::spawn(async move { cms.list(&params).await })
    };
    let created = timeout(STEP, cms.create(&PostParams::default(), &config_map("c1")))
        .await
        .expect("create in time")
        .expect("create");
    let created_rv: i64 = created
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("created resourceVersion");
    let caught_up = timeout(STEP, waiting)
        .await
        .expect("waiting list finishes")
        .expect("task")
        .expect("the list succeeds once the store reaches its resourceVersion");
    let listed_rv: i64 = caught_up
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("list resourceVersion");
    assert!(
        listed_rv > now,
        "answered at {listed_rv}, older than {ahead}"
    );
    let has_c1 = caught_up
        .items
        .iter()
        .any(|c| c.metadata.name.as_deref() == Some("c1"));
    assert_eq!(
        has_c1,
        listed_rv >= created_rv,
        "a list at {listed_rv} and c1 written at {created_rv}"
    );
    let later = timeout(
        STEP,
        cms.list(
            &ListParams::default()
                .at(&created_rv.to_string())
                .matching(VersionMatch::NotOlderThan),
        ),
    )
    .await
    .expect("list in time")
    .expect("list");
    assert!(
        later
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("c1"))
    );

    // Far ahead: 504 with upstream's Status after the wait.
    let far = (now + 1_000_000).to_string();
    let err = timeout(
        STEP,
        cms.list(
            &ListParams::default()
                .at(&far)
                .matching(VersionMatch::NotOlderThan),
        ),
    )
    .await
    .expect("answer in time")
    .expect_err("a resourceVersion the server never reaches");
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}");
    };
    assert_eq!(status.code, 504);
    assert_eq!(status.reason, "Timeout");
    assert!(
        status.message.starts_with(&format!(
            "Timeout: Too large resource version: {far}, current: "
        )),
        "{}",
        status.message
    );
    let err = timeout(STEP, cms.get_metadata_opt("c1"))
        .await
        .expect("answer in time");
    assert!(err.is_ok(), "plain reads are unaffected: {err:?}");

    // DELETE responses: a Status for config maps, the object for pods (kube-rs' Either).
    let deleted = timeout(STEP, cms.delete("c1", &DeleteParams::default()))
        .await
        .expect("delete in time")
        .expect("delete");
    let status = deleted.right().expect("a Status for config maps");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "p1" },
        "spec": { "containers": [{ "name": "c", "image": "busybox" }] }
    }))
    .expect("pod");
    timeout(STEP, pods.create(&PostParams::default(), &pod))
        .await
        .expect("create in time")
        .expect("create pod");
    let deleted = timeout(STEP, pods.delete("p1", &DeleteParams::default()))
        .await
        .expect("delete in time")
        .expect("delete pod");
    let pod = deleted.left().expect("the pod itself");
    assert_eq!(pod.metadata.name.as_deref(), Some("p1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_streaming_list_watcher_gets_initial_events_then_live_ones() {
    use kube::runtime::watcher;
    use tokio_stream::StreamExt;

    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let client = client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    for i in 0..5 {
        timeout(
            STEP,
            cms.create(&PostParams::default(), &config_map(&format!("c{i}"))),
        )
        .await
        .expect("create in time")
        .expect("create");
    }
    // sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan: the
    // initial state arrives as ADDED events closed by the `k8s.io/initial-events-end` bookmark,
    // which kube-rs needs to emit InitDone.
    let mut events = Box::pin(watcher(
        cms.clone(),
        watcher::Config::default().streaming_lists(),
    ));
    let mut initial = Vec::new();
    loop {
        let ev = timeout(STEP, events.next())
            .await
            .expect("watcher event in time")
            .expect("stream continues")
            .expect("no watcher error");
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(cm) => initial.push(cm.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected event before InitDone: {other:?}"),
        }
    }
    initial.sort();
    let expected: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
    assert_eq!(initial, expected);
    timeout(
        STEP,
        cms.create(&PostParams::default(), &config_map("live")),
    )
    .await
    .expect("create in time")
    .expect("create");
    loop {
        let ev = timeout(STEP, events.next())
            .await
            .expect("live event in time")
            .expect("stream continues")
            .expect("no watcher error");
        if let watcher::Event::Apply(cm) = ev {
            assert_eq!(cm.metadata.name.as_deref(), Some("live"));
            break;
        }
    }
}
