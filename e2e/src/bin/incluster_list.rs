//! A kube-rs program meant to run as a pod: `kube::Config::infer()` (what
//! `kube::Client::try_default()` uses) finds no kubeconfig and falls back to the in-cluster
//! configuration (`KUBERNETES_SERVICE_HOST`/`PORT`, the service-account token,
//! `ca.crt` and `namespace` under `/var/run/secrets/kubernetes.io/serviceaccount`), lists
//! the pods of its namespace as its service account and prints one `pod <name>` line each,
//! then `listed <n> pods as <namespace>`. Exits 1 with the error otherwise.
//! `e2e/tests/pods_clients.rs` runs it as a container's command.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("incluster_list: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> anyhow::Result<()> {
    let config = kube::Config::infer().await?;
    let namespace = config.default_namespace.clone();
    println!("api server {}", config.cluster_url);
    let client = kube::Client::try_from(config)?;
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let list = pods.list(&ListParams::default()).await?;
    for p in &list.items {
        println!("pod {}", p.metadata.name.as_deref().unwrap_or_default());
    }
    println!("listed {} pods as {namespace}", list.items.len());
    Ok(())
}
