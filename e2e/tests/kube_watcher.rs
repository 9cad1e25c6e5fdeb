//! kube-rs against `capstan server`: a watch from a compacted resourceVersion gets an ERROR
//! event with a `410 Expired` Status that kube-rs parses, and kube-rs' `watcher` (the
//! informer behind every kube-rs controller) recovers from it by relisting: a second `Init`
//! … `InitDone` sequence with exactly the objects that exist now, then live events again.
//!
//! How the watcher is made to resume from a compacted resourceVersion: `watcher` is a lazy
//! stream that starts its watch (from the list's resourceVersion) only when polled after
//! `InitDone`. The test drains the initial list, stops polling, changes the collection and
//! waits until the store's compactor (`--etcd-compaction-interval 1s`) has dropped the history
//! after that resourceVersion, then polls again. The watch cache never serves history the store
//! has compacted, so the watch gets the store's 410. (A watcher reconnecting from a
//! resourceVersion that is still retained is served from the cache; the live phase below
//! checks that such reconnects, every 2 s here, do not relist.)

use std::collections::BTreeSet;
use std::time::Duration;

use e2e::ServerProcess;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, PostParams, VersionMatch, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use kube::runtime::watcher;
use kube::{Client, Config, ResourceExt};
use tokio::time::{Instant, timeout};
use tokio_stream::{Stream, StreamExt};

/// The namespace the test works in (nothing else writes there).
const NS: &str = "kube-watcher";
/// The longest any single step may take before the test fails instead of hanging.
const STEP: Duration = Duration::from_secs(30);

type Ev = Result<watcher::Event<ConfigMap>, watcher::Error>;

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_owned(), value.to_owned())].into()),
        ..ConfigMap::default()
    }
}

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config from the admin kubeconfig");
    Client::try_from(config).expect("kube client")
}

/// Awaits `fut`, failing the test if it takes longer than [`STEP`].
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    timeout(STEP, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {STEP:?}"))
}

async fn create(api: &Api<ConfigMap>, name: &str) {
    within(
        "create",
        api.create(&PostParams::default(), &config_map(name, "1")),
    )
    .await
    .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

async fn delete(api: &Api<ConfigMap>, name: &str) {
    within("delete", api.delete(name, &DeleteParams::default()))
        .await
        .unwrap_or_else(|e| panic!("delete {name}: {e}"));
}

/// The watcher's next item; fails the test if none comes within [`STEP`].
async fn next(events: &mut (impl Stream<Item = Ev> + Unpin), waiting_for: &str) -> Ev {
    within(&format!("waiting for {waiting_for}"), events.next())
        .await
        .expect("the watcher stream never ends")
}

/// Consumes `Init`, `InitApply`…, `InitDone` and returns the names listed.
async fn initial_list(events: &mut (impl Stream<Item = Ev> + Unpin)) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    loop {
        match next(events, "InitDone").await {
            Ok(watcher::Event::InitApply(cm)) => {
                names.insert(cm.name_any());
            }
            Ok(watcher::Event::InitDone) => return names,
            other => panic!("unexpected watcher item during a list: {other:?}"),
        }
    }
}

fn assert_expired(status: &Status, context: &str) {
    assert_eq!(status.code, 410, "{context}: {status:?}");
    assert_eq!(status.reason, "Expired", "{context}: {status:?}");
    assert!(
        status.message.starts_with("too old resource version"),
        "{context}: {status:?}"
    );
}

/// How many ConfigMap watches the server has answered (`apiserver_request_total`).
fn config_map_watches(server: &ServerProcess) -> u64 {
    let (ok, metrics, err) = server
        .kubectl(&["get", "--raw", "/metrics"])
        .expect("kubectl runs");
    assert!(ok, "GET /metrics: {err}");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains(r#"verb="WATCH""#)
                && l.contains(r#"resource="configmaps""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

#[test]
fn kube_rs_watcher_relists_after_its_watch_from_a_compacted_resource_version_gets_410() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start_with(
        &dir.path().join("data"),
        &["--etcd-compaction-interval", "1s"],
    )
    .expect("server starts");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async { timeout(Duration::from_secs(240), scenario(&server)).await })
        .unwrap_or_else(|_| panic!("test took over 240 s; server log:\n{}", server.log()));
}

async fn scenario(server: &ServerProcess) {
    let client = client(server).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NS.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    within(
        "create namespace",
        namespaces.create(&PostParams::default(), &ns),
    )
    .await
    .expect("create namespace");
    let api: Api<ConfigMap> = Api::namespaced(client, NS);

    // (1) Some objects, then the watcher's initial list (its watch is not started yet).
    for i in 0..10 {
        create(&api, &format!("before-{i}")).await;
    }
    // Short server-side watch timeouts: the live phase sees several reconnects.
    let mut events = Box::pin(watcher(api.clone(), watcher::Config::default().timeout(2)));
    assert!(
        matches!(next(&mut events, "Init").await, Ok(watcher::Event::Init)),
        "the watcher starts with Init"
    );
    assert_eq!(initial_list(&mut events).await, names("before-", 0..10));
    // Nothing was written since the watcher's list, so a list now has its resourceVersion.
    let listed = within("list", api.list(&ListParams::default()))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("list resourceVersion");
    eprintln!("watcher listed at resourceVersion {listed}; it is paused now");

    // While the watcher is paused: more objects, deletions, and churn on one object until the
    // compactor has dropped the history a watch from `listed` needs (from `listed` + 1 on).
    for i in 0..20 {
        create(&api, &format!("during-{i}")).await;
    }
    for i in 0..5 {
        delete(&api, &format!("before-{i}")).await;
    }
    create(&api, "churn").await;
    let probe = (listed.parse::<i64>().expect("numeric resourceVersion") + 1).to_string();
    let exact = ListParams::default()
        .at(&probe)
        .matching(VersionMatch::Exact);
    let deadline = Instant::now() + STEP;
    let mut writes = 0;
    loop {
        match within("exact list", api.list(&exact)).await {
            Err(kube::Error::Api(status)) if status.code == 410 => {
                assert_expired(&status, "exact list below the compacted revision");
                break;
            }
            Ok(_) => {}
            Err(e) => panic!("exact list at {probe}: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "history at {probe} was never compacted; server log:\n{}",
            server.log()
        );
        writes += 1;
        let churn = config_map("churn", &writes.to_string());
        within(
            "update",
            api.replace("churn", &PostParams::default(), &churn),
        )
        .await
        .expect("update churn");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("history up to {probe} compacted after {writes} more updates");

    // (2) A raw kube-rs watch from the compacted resourceVersion: an ERROR event, 410 Expired.
    let mut raw = std::pin::pin!(
        within(
            "watch",
            api.watch(&WatchParams::default().timeout(5), &listed)
        )
        .await
        .expect("watch request is accepted (the error comes as an event)")
    );
    let first = within("the first watch event", raw.next())
        .await
        .expect("the watch sends an event before it ends")
        .expect("the event parses");
    eprintln!("raw watch from {listed}: {first:?}");
    match first {
        WatchEvent::Error(status) => assert_expired(&status, "raw watch"),
        other => panic!("expected an ERROR event, got {other:?}"),
    }
    let after = within("the end of the watch", raw.next()).await;
    assert!(after.is_none(), "the watch ends after the 410: {after:?}");

    // (3) The watcher resumes: its watch from `listed` gets the same 410, which it reports
    // and then recovers from by relisting.
    match next(&mut events, "the 410 from the resumed watch").await {
        Err(watcher::Error::WatchError(status)) => {
            eprintln!("watcher error: {status:?}");
            assert_expired(&status, "watcher");
        }
        other => panic!("expected the watcher to report the 410, got {other:?}"),
    }
    assert!(
        matches!(
            next(&mut events, "the relist's Init").await,
            Ok(watcher::Event::Init)
        ),
        "after a 410 the watcher relists, starting with Init"
    );
    let mut expected = names("before-", 5..10);
    expected.extend(names("during-", 0..20));
    expected.insert("churn".to_owned());
    assert_eq!(
        initial_list(&mut events).await,
        expected,
        "the relist has the objects created while paused and not the deleted ones"
    );

    // Live again: creates and deletes arrive as Apply/Delete, also after the server ends the
    // watch (timeoutSeconds=2) and the watcher resumes from its last resourceVersion: any
    // other item (another Init would be a needless relist) fails the test.
    create(&api, "live-0").await;
    match next(&mut events, "Apply(live-0)").await {
        Ok(watcher::Event::Apply(cm)) if cm.name_any() == "live-0" => {}
        other => panic!("expected Apply(live-0), got {other:?}"),
    }
    delete(&api, "during-0").await;
    match next(&mut events, "Delete(during-0)").await {
        Ok(watcher::Event::Delete(cm)) if cm.name_any() == "during-0" => {}
        other => panic!("expected Delete(during-0), got {other:?}"),
    }
    // Outlive server-side watch timeouts while polling, so the watcher reconnects (from its
    // last resourceVersion, which the watch cache holds); no event is due meanwhile.
    let watches_before = config_map_watches(server);
    let quiet_until = Instant::now() + Duration::from_secs(5);
    if let Ok(item) = tokio::time::timeout_at(quiet_until, events.next()).await {
        panic!("unexpected watcher item while nothing changed: {item:?}");
    }
    let reconnects = config_map_watches(server) - watches_before;
    eprintln!("the watcher reconnected {reconnects} times in 5 s without relisting");
    assert!(
        reconnects >= 1,
        "the watcher reconnects when a 2 s watch times out"
    );
    create(&api, "live-1").await;
    match next(&mut events, "Apply(live-1)").await {
        Ok(watcher::Event::Apply(cm)) if cm.name_any() == "live-1" => {}
        other => panic!("expected Apply(live-1) after the reconnects, got {other:?}"),
    }
}
