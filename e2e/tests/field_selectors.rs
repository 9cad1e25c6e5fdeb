//! Field selectors as upstream's field sets evaluate them, through kube-rs: an absent field is
//! its zero value (`spec.unschedulable=false` matches every schedulable node, before and
//! after `Api::<Node>::cordon` / `uncordon`), on the watch cache's lists, on paged lists
//! (read from the store) and on watches; each resource's own labels (pods, services, jobs,
//! events, secrets, namespaces, the legacy `spec.host`), and upstream's 400 for labels a
//! resource does not support.

use std::time::Duration;

use e2e::ServerProcess;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, Secret, Service};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::json;
use tokio::time::timeout;
use tokio_stream::StreamExt;

const STEP: Duration = Duration::from_secs(30);

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config from the admin kubeconfig");
    Client::try_from(config).expect("kube client")
}

async fn create<K>(api: &Api<K>, value: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value).expect("typed object");
    timeout(STEP, api.create(&PostParams::default(), &obj))
        .await
        .expect("create in time")
        .expect("create");
}

/// Names of the objects a field selector lists: from the watch cache (a full list) and from
/// the store (a paged list); both must agree.
async fn names<K>(api: &Api<K>, fields: &str) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let full = timeout(STEP, api.list(&ListParams::default().fields(fields)))
        .await
        .expect("list in time")
        .unwrap_or_else(|e| panic!("list {fields}: {e}"));
    let paged = timeout(
        STEP,
        api.list(&ListParams::default().fields(fields).limit(100)),
    )
    .await
    .expect("list in time")
    .unwrap_or_else(|e| panic!("paged list {fields}: {e}"));
    let a: Vec<String> = full.items.iter().map(|o| o.name_any()).collect();
    let b: Vec<String> = paged.items.iter().map(|o| o.name_any()).collect();
    assert_eq!(a, b, "cache and store lists of {fields}");
    a
}

/// The 400 message a list with `fields` gets.
async fn rejected<K>(api: &Api<K>, fields: &str) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match timeout(STEP, api.list(&ListParams::default().fields(fields)))
        .await
        .expect("list in time")
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 400, "{fields}: {status:?}");
            assert_eq!(status.reason, "BadRequest", "{fields}: {status:?}");
            status.message
        }
        other => panic!("{fields}: expected a 400, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_and_the_unschedulable_field_selector() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let client = client(&server).await;
    let nodes: Api<Node> = Api::all(client.clone());
    // Nodes as a kubelet registers them: no spec.unschedulable at all.
    for name in ["n1", "n2"] {
        create(&nodes, json!({"metadata": {"name": name}})).await;
    }
    assert_eq!(
        names(&nodes, "spec.unschedulable=false").await,
        ["n1", "n2"]
    );
    assert_eq!(
        names(&nodes, "spec.unschedulable==false").await,
        ["n1", "n2"]
    );
    assert!(names(&nodes, "spec.unschedulable=true").await.is_empty());

    // A watch with the selector: n1 leaves it (DELETED) when cordoned.
    let mut events = Box::pin(
        timeout(
            STEP,
            nodes.watch(
                &WatchParams::default().fields("spec.unschedulable=false"),
                "0",
            ),
        )
        .await
        .expect("watch in time")
        .expect("watch"),
    );

    timeout(STEP, nodes.cordon("n1"))
        .await
        .expect("cordon in time")
        .expect("cordon");
    assert_eq!(names(&nodes, "spec.unschedulable=false").await, ["n2"]);
    assert_eq!(names(&nodes, "spec.unschedulable=true").await, ["n1"]);
    assert_eq!(names(&nodes, "spec.unschedulable!=false").await, ["n1"]);
    loop {
        let ev = timeout(STEP, events.next())
            .await
            .expect("watch event in time")
            .expect("watch continues")
            .expect("event decodes");
        if let WatchEvent::Deleted(n) = ev {
            assert_eq!(n.name_any(), "n1");
            break;
        }
    }

    timeout(STEP, nodes.uncordon("n1"))
        .await
        .expect("uncordon in time")
        .expect("uncordon");
    assert_eq!(
        names(&nodes, "spec.unschedulable=false").await,
        ["n1", "n2"]
    );
    loop {
        let ev = timeout(STEP, events.next())
            .await
            .expect("watch event in time")
            .expect("watch continues")
            .expect("event decodes");
        if let WatchEvent::Added(n) = ev
            && n.name_any() == "n1"
        {
            break;
        }
    }

    // Nodes take metadata.name and spec.unschedulable only.
    assert_eq!(
        rejected(&nodes, "metadata.namespace=default").await,
        "field label not supported: metadata.namespace"
    );
    assert_eq!(
        rejected(&nodes, "spec.providerID=x").await,
        "field label not supported: spec.providerID"
    );
    let namespaces: Api<Namespace> = Api::all(client);
    assert!(
        names(&namespaces, "status.phase=Active")
            .await
            .contains(&"default".to_owned())
    );
    assert_eq!(
        rejected(&namespaces, "metadata.namespace=x").await,
        "field label not supported: metadata.namespace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_resource_selects_on_upstream_fields() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let client = client(&server).await;

    // Pods: zero values, podIP from podIPs, the legacy spec.host.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let container = json!([{"name": "c", "image": "nginx"}]);
    create(
        &pods,
        json!({"metadata": {"name": "p1"}, "spec": {"containers": container, "nodeName": "n1"}}),
    )
    .await;
    create(
        &pods,
        json!({"metadata": {"name": "p2"},
               "spec": {"containers": container, "hostNetwork": true}}),
    )
    .await;
    assert_eq!(names(&pods, "spec.hostNetwork=false").await, ["p1"]);
    assert_eq!(names(&pods, "spec.hostNetwork=true").await, ["p2"]);
    assert_eq!(names(&pods, "spec.nodeName=n1").await, ["p1"]);
    assert_eq!(names(&pods, "spec.host=n1").await, ["p1"]);
    assert_eq!(names(&pods, "spec.nodeName=").await, ["p2"]);
    assert_eq!(names(&pods, "status.podIP=").await, ["p1", "p2"]);
    assert_eq!(names(&pods, "status.podIPs=").await, ["p1", "p2"]);
    assert_eq!(
        names(
            &pods,
            "spec.restartPolicy=Always,spec.schedulerName=default-scheduler"
        )
        .await,
        ["p1", "p2"]
    );
    let account = pods
        .get("p1")
        .await
        .expect("get p1")
        .spec
        .and_then(|s| s.service_account_name)
        .unwrap_or_default();
    assert_eq!(
        names(&pods, &format!("spec.serviceAccountName={account}")).await,
        ["p1", "p2"]
    );
    assert_eq!(names(&pods, "status.phase=Pending").await, ["p1", "p2"]);
    assert_eq!(
        names(&pods, "status.nominatedNodeName=").await,
        ["p1", "p2"]
    );
    assert_eq!(
        rejected(&pods, "spec.priority=0").await,
        "field label not supported: spec.priority"
    );

    // Services: spec.type and spec.clusterIP.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    create(
        &services,
        json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    create(
        &services,
        json!({"metadata": {"name": "ext"},
               "spec": {"type": "ExternalName", "externalName": "example.com"}}),
    )
    .await;
    let cluster_ip = names(&services, "spec.type=ClusterIP").await;
    assert!(cluster_ip.contains(&"web".to_owned()), "{cluster_ip:?}");
    assert!(!cluster_ip.contains(&"ext".to_owned()), "{cluster_ip:?}");
    assert_eq!(names(&services, "spec.type=ExternalName").await, ["ext"]);
    let ip = services
        .get("web")
        .await
        .expect("get web")
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("cluster IP");
    assert_eq!(
        names(&services, &format!("spec.clusterIP={ip}")).await,
        ["web"]
    );

    // Jobs: status.successful is status.succeeded, 0 when absent.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    create(
        &jobs,
        json!({"metadata": {"name": "j1"}, "spec": {"template": {"spec": {
            "containers": container, "restartPolicy": "Never"}}}}),
    )
    .await;
    assert_eq!(names(&jobs, "status.successful=0").await, ["j1"]);
    assert!(names(&jobs, "status.successful=1").await.is_empty());

    // Events: source is source.component (or reportingComponent).
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    create(
        &events,
        json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p1",
               "namespace": "default"}, "reason": "Started", "type": "Normal",
               "source": {"component": "kubelet"}}),
    )
    .await;
    create(
        &events,
        json!({"metadata": {"name": "e2"}, "involvedObject": {"kind": "Pod", "name": "p2",
               "namespace": "default"}, "reason": "Killing", "type": "Warning",
               "reportingComponent": "ctrl", "reportingInstance": "ctrl-1",
               "action": "Kill", "eventTime": "2024-01-01T00:00:00.000000Z"}),
    )
    .await;
    assert_eq!(names(&events, "source=kubelet").await, ["e1"]);
    assert_eq!(names(&events, "source=ctrl").await, ["e2"]);
    assert_eq!(names(&events, "reportingComponent=ctrl").await, ["e2"]);
    assert_eq!(
        names(
            &events,
            "involvedObject.kind=Pod,involvedObject.name=p2,type=Warning"
        )
        .await,
        ["e2"]
    );

    // Secrets: type.
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    create(
        &secrets,
        json!({"metadata": {"name": "s1"}, "type": "Opaque", "stringData": {"k": "v"}}),
    )
    .await;
    assert_eq!(names(&secrets, "type=Opaque").await, ["s1"]);
    assert_eq!(
        rejected(&secrets, "data.k=v").await,
        "field label not supported: data.k"
    );
}
