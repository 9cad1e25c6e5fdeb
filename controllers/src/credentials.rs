//! Per-controller credentials, as kube-controller-manager's
//! `--use-service-account-credentials`: the root client (`system:kube-controller-manager`)
//! ensures the ServiceAccount `kube-system/<controller>` exists, asks TokenRequest for a token,
//! and the controller's client authenticates with it (a token file kube-rs re-reads every
//! minute, rewritten before the token expires, and at once — with the account recreated —
//! when the account is deleted, as upstream's dynamic client builder recovers after a 401).
//! RBAC then applies upstream's `system:controller:*` roles to each loop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio_util::sync::CancellationToken;

/// Lifetime asked for each token (kube-controller-manager asks for an hour too).
const TOKEN_SECONDS: i64 = 3600;

/// Upstream's service account for a controller named as `--controllers` spells it.
pub(crate) fn service_account(controller: &str) -> String {
    let known = match controller {
        "replicaset" => "replicaset-controller",
        "replicationcontroller" => "replication-controller",
        "deployment" => "deployment-controller",
        "garbage-collector" | "garbagecollector" => "generic-garbage-collector",
        "namespace" => "namespace-controller",
        "serviceaccount" => "service-account-controller",
        "endpoint" => "endpoint-controller",
        "endpointslice" => "endpointslice-controller",
        "endpointslice-mirroring" | "endpointslicemirroring" => "endpointslicemirroring-controller",
        "job" => "job-controller",
        "cronjob" => "cronjob-controller",
        "statefulset" => "statefulset-controller",
        "daemonset" => "daemon-set-controller",
        "node-lifecycle" | "nodelifecycle" | "node-ipam" | "nodeipam" => "node-controller",
        "pod-garbage-collector" | "podgc" => "pod-garbage-collector",
        "ttl-after-finished" | "ttlafterfinished" => "ttl-after-finished-controller",
        "ttl" => "ttl-controller",
        "root-ca-certificate-publisher" | "root-ca-cert-publisher" => "root-ca-cert-publisher",
        "clusterrole-aggregation" => "clusterrole-aggregation-controller",
        "resourcequota" | "resource-quota" => "resourcequota-controller",
        "disruption" => "disruption-controller",
        "horizontalpodautoscaling" => "horizontal-pod-autoscaler",
        "persistentvolume-binder" => "persistent-volume-binder",
        "persistentvolume-expander" => "expand-controller",
        "persistentvolumeclaim-protection" => "pvc-protection-controller",
        "persistentvolume-protection" => "pv-protection-controller",
        "ephemeral-volume" => "ephemeral-volume-controller",
        "attachdetach" | "persistentvolume-attach-detach" => "attachdetach-controller",
        "service" | "service-lb" => "service-controller",
        "cloud-node-lifecycle" | "route" => "route-controller",
        "csrsigning" | "csrapproving" | "csrcleaner" => "certificate-controller",
        "legacy-serviceaccount-token-cleaner" => "legacy-service-account-token-cleaner",
        "validatingadmissionpolicy-status" => "validatingadmissionpolicy-status-controller",
        "service-cidr-controller" => "service-cidrs-controller",
        other => return format!("{other}-controller"),
    };
    known.to_owned()
}

/// Hands out clients that authenticate as controllers' service accounts.
pub(crate) struct Credentials {
    root: kube::Client,
    /// The root client's configuration (server, CA); None: every controller uses the root
    /// client, as upstream without `--use-service-account-credentials`.
    config: Option<kube::Config>,
    /// One HTTP/2 connection (no client certificate) that all controllers' clients share,
    /// as client-go's transport cache shares one per TLS configuration.
    transport: std::sync::OnceLock<crate::client::Transport>,
    dir: PathBuf,
}

impl Credentials {
    /// Credentials minted through `root`; `config` is the root client's configuration.
    pub(crate) fn new(root: kube::Client, config: Option<kube::Config>) -> Self {
        let tmp = std::env::temp_dir();
        sweep_stale(&tmp);
        let dir = tmp.join(format!(
            "{DIR_PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        Credentials {
            root,
            config,
            transport: std::sync::OnceLock::new(),
            dir,
        }
    }

    /// The controller manager's own client (for informers' watches and lists).
    pub(crate) fn root(&self) -> kube::Client {
        self.root.clone()
    }

    /// The CA bundle (PEM) of the root client's configuration, if it has one.
    pub(crate) fn root_ca_pem(&self) -> Option<std::sync::Arc<str>> {
        let certs = self.config.as_ref()?.root_cert.as_ref()?;
        let pem: String = certs.iter().map(Vec::as_slice).map(der_to_pem).collect();
        (!pem.is_empty()).then(|| pem.into())
    }

    /// A client for `controller`'s service account, its token refreshed until `shutdown`.
    pub(crate) async fn client_for(
        &self,
        controller: &str,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<kube::Client> {
        let Some(config) = &self.config else {
            return Ok(self.root.clone());
        };
        let sa = service_account(controller);
        let api: Api<ServiceAccount> = Api::namespaced(self.root.clone(), "kube-system");
        let mut uid = ensure_service_account(&api, &sa).await?;
        // Tokens are credentials: the directory is the process owner's only.
        {
            #[cfg(unix)]
            use std::os::unix::fs::DirBuilderExt;
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            builder.mode(0o700);
            builder.create(&self.dir)?;
        }
        let path = self.dir.join(format!("{sa}.token"));
        let lifetime = mint(&api, &sa, &path).await?;
        let mut config = config.clone();
        crate::client::set_user_agent(&mut config, "kube-controller-manager", Some(&sa));
        config.auth_info = kube::config::AuthInfo {
            token_file: Some(path.to_string_lossy().into_owned()),
            ..kube::config::AuthInfo::default()
        };
        let transport = match self.transport.get() {
            Some(t) => t.clone(),
            None => {
                let built = crate::client::transport(&config)?;
                self.transport.get_or_init(|| built).clone()
            }
        };
        let client = crate::client::client_over(transport, &config)?;
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut refresh_at = tokio::time::Instant::now() + lifetime.mul_f64(0.8);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(CHECK_EVERY) => {}
                }
                // A deleted (or deleted and recreated) ServiceAccount invalidates the token
                // at once: recreate it and mint a new one, as upstream's dynamic client
                // builder does after a 401 (kube-rs re-reads the token file within a minute).
                let replaced = match api.get_opt(&sa).await {
                    Ok(current) => current.and_then(|a| a.metadata.uid) != Some(uid.clone()),
                    Err(_) => false,
                };
                if replaced {
                    match ensure_service_account(&api, &sa).await {
                        Ok(new_uid) => {
                            tracing::warn!(serviceaccount = %sa, "service account was deleted; recreated it");
                            uid = new_uid;
                        }
                        Err(e) => {
                            tracing::warn!(serviceaccount = %sa, error = %format!("{e:#}"), "recreating service account failed");
                            continue;
                        }
                    }
                } else if tokio::time::Instant::now() < refresh_at {
                    continue;
                }
                refresh_at = match mint(&api, &sa, &path).await {
                    Ok(l) => tokio::time::Instant::now() + l.mul_f64(0.8),
                    Err(e) => {
                        tracing::warn!(serviceaccount = %sa, error = %format!("{e:#}"), "token refresh failed");
                        tokio::time::Instant::now()
                    }
                };
            }
        });
        Ok(client)
    }
}

/// How often each controller's ServiceAccount is checked (and its token refreshed when due).
const CHECK_EVERY: Duration = Duration::from_secs(10);

/// The uid of ServiceAccount `kube-system/<sa>`, created first if it is missing.
async fn ensure_service_account(api: &Api<ServiceAccount>, sa: &str) -> anyhow::Result<String> {
    if let Some(uid) = api.get_opt(sa).await?.and_then(|a| a.metadata.uid) {
        return Ok(uid);
    }
    let obj = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(sa.to_owned()),
            namespace: Some("kube-system".to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match api.create(&PostParams::default(), &obj).await {
        Ok(created) => created.metadata.uid,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            api.get_opt(sa).await?.and_then(|a| a.metadata.uid)
        }
        Err(e) => return Err(e.into()),
    }
    .ok_or_else(|| anyhow::anyhow!("service account kube-system/{sa} has no uid"))
}

/// Token directories are `<tmp>/capstan-controllers-<pid>-<uuid>`.
const DIR_PREFIX: &str = "capstan-controllers-";

/// Removes token directories left by controller managers that died without cleaning up
/// (`kill -9`): those whose process no longer exists. Only where `/proc` tells; a directory
/// of a live process (or of a reused pid) is left alone.
fn sweep_stale(tmp: &Path) {
    let proc_dir = Path::new("/proc");
    if !proc_dir.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = stale_pid(&name.to_string_lossy()) else {
            continue;
        };
        if !proc_dir.join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The pid in a token directory's name, if `name` is one.
fn stale_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(DIR_PREFIX)?;
    let (pid, uuid) = rest.split_once('-')?;
    (uuid.len() == 32 && uuid.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| pid.parse().ok())
        .flatten()
}

impl Drop for Credentials {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Asks TokenRequest for a token of `sa` and writes it to `path` (atomically); returns its
/// lifetime.
async fn mint(api: &Api<ServiceAccount>, sa: &str, path: &Path) -> anyhow::Result<Duration> {
    let req = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let resp = api
        .create_token_request(sa, &PostParams::default(), &req)
        .await?;
    let token = resp
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow::anyhow!("TokenRequest for {sa} returned no token"))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, token.as_bytes())?;
    std::fs::rename(&tmp, path)?;
    Ok(Duration::from_secs(
        u64::try_from(TOKEN_SECONDS).unwrap_or(3600),
    ))
}

/// PEM armour for one DER certificate (base64, 64 columns).
fn der_to_pem(der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len().div_ceil(3) * 4);
    for chunk in der.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(chunk.get(1).copied().unwrap_or(0)) << 8)
            | u32::from(chunk.get(2).copied().unwrap_or(0));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_of_dead_processes_are_swept() {
        let base = std::env::temp_dir().join(format!("sweep-test-{}", uuid::Uuid::new_v4()));
        let hex = uuid::Uuid::new_v4().simple().to_string();
        // Above any pid_max Linux allows (2^22), so never a live process.
        let dead = base.join(format!("{DIR_PREFIX}4294960-{hex}"));
        let live = base.join(format!("{DIR_PREFIX}{}-{hex}", std::process::id()));
        let other = base.join(format!("{DIR_PREFIX}4294960-not-a-uuid"));
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("x.token"), "t").unwrap();
        }
        sweep_stale(&base);
        let on_linux = Path::new("/proc/self").exists();
        assert_eq!(dead.exists(), !on_linux);
        assert!(live.exists());
        assert!(other.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn token_directory_names_give_their_pid() {
        let hex = "0123456789abcdef0123456789abcdef";
        assert_eq!(stale_pid(&format!("{DIR_PREFIX}42-{hex}")), Some(42));
        assert_eq!(stale_pid(&format!("{DIR_PREFIX}x-{hex}")), None);
        assert_eq!(stale_pid("capstan-node-1"), None);
    }
}
