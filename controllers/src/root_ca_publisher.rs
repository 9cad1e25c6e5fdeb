//! The root CA publisher (`root-ca-cert-publisher`): a `kube-root-ca.crt` ConfigMap with key
//! `ca.crt` (the cluster CA bundle) in every active namespace, restored when deleted or edited
//! (upstream `pkg/controller/certificates/rootcacertpublisher`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::serviceaccount::{benign_create_error, terminating};
use crate::{Context, LoopFuture};

/// Name of the published ConfigMap.
const CONFIG_MAP: &str = "kube-root-ca.crt";
/// Key of the CA bundle in it.
const DATA_KEY: &str = "ca.crt";
/// Upstream's description annotation key.
const DESCRIPTION_KEY: &str = "kubernetes.io/description";
/// Upstream's description annotation text.
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver \
when using internal endpoints such as the internal service IP or kubernetes.default.svc. No \
other usage is guaranteed across distributions of Kubernetes clusters.";

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// The ConfigMap's wanted data and annotations.
fn wanted(ca: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let data = BTreeMap::from([(DATA_KEY.to_owned(), ca.to_owned())]);
    let annotations = BTreeMap::from([(DESCRIPTION_KEY.to_owned(), DESCRIPTION.to_owned())]);
    (data, annotations)
}

/// Publishes the bundle into namespace `name`.
async fn sync(
    ctx: Context,
    ca: String,
    namespaces: Store<Namespace>,
    maps: Store<ConfigMap>,
    name: String,
) -> SyncResult {
    let Some(ns) = namespaces.get(&ObjectRef::new(&name)) else {
        return Ok(None);
    };
    if terminating(&ns) {
        return Ok(None);
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &name);
    let (data, annotations) = wanted(&ca);
    match maps.get(&ObjectRef::new(CONFIG_MAP).within(&name)) {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(CONFIG_MAP.to_owned()),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..ConfigMap::default()
            };
            match api.create(&PostParams::default(), &cm).await {
                Ok(_) => {}
                Err(e) if benign_create_error(&e) => {}
                Err(e) => return Err(ReconcileError::Kube(e)),
            }
        }
        Some(cm) => {
            let have_annotation = cm
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESCRIPTION_KEY))
                .is_some_and(|v| v == DESCRIPTION);
            if cm.data.as_ref() == Some(&data) && have_annotation && cm.binary_data.is_none() {
                return Ok(None);
            }
            let mut cm = (*cm).clone();
            cm.data = Some(data);
            cm.binary_data = None;
            cm.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(DESCRIPTION_KEY.to_owned(), DESCRIPTION.to_owned());
            match api.replace(CONFIG_MAP, &PostParams::default(), &cm).await {
                Ok(_) => {}
                // Stale cache: look again once the watch catches up.
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                    return Ok(Some(Duration::from_millis(200)));
                }
                Err(e) => return Err(ReconcileError::Kube(e)),
            }
        }
    }
    Ok(None)
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Some(ca) = ctx.root_ca.clone() else {
        tracing::warn!(
            "root-ca-cert-publisher: the controller manager knows no root CA; not publishing"
        );
        shutdown.cancelled().await;
        return Ok(());
    };
    let queue = Queue::default();
    let q = queue.clone();
    let namespaces = ctx
        .informers
        .watch::<Namespace>(
            Box::new(move |_old, new: Option<&Namespace>| {
                if let Some(n) = new.and_then(|n| n.metadata.name.clone()) {
                    q.add(n);
                }
            }),
            &shutdown,
        )
        .await;
    let q = queue.clone();
    // Only the published ConfigMaps are watched (a field selector on the name): a cache of
    // every ConfigMap in the cluster held ~6 KB per ConfigMap (600 MB at 100k) for the one
    // per namespace this controller looks at. Upstream's publisher watches them all.
    let maps = ctx
        .informers
        .watch_selected::<ConfigMap>(
            watcher::Config::default().fields(&format!("metadata.name={CONFIG_MAP}")),
            Box::new(move |old: Option<&ConfigMap>, new: Option<&ConfigMap>| {
                let Some(cm) = new.or(old) else { return };
                if let Some(ns) = cm.metadata.namespace.clone() {
                    q.add(ns);
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async { namespaces.wait_until_ready().await?; maps.wait_until_ready().await } => r?,
    }
    for ns in namespaces.state() {
        if let Some(n) = ns.metadata.name.clone() {
            queue.add(n);
        }
    }
    let c = ctx.clone();
    let ca = ca.to_string();
    run_workers(&ctx, &queue, 1, &shutdown, move |key| {
        sync(c.clone(), ca.clone(), namespaces.clone(), maps.clone(), key)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_config_map_carries_the_bundle_under_ca_crt() {
        let (data, ann) = wanted("PEM");
        assert_eq!(data.get("ca.crt").map(String::as_str), Some("PEM"));
        assert!(
            ann.get("kubernetes.io/description")
                .is_some_and(|d| d.starts_with("Contains a CA bundle"))
        );
    }
}
