//! `capstan`: the one binary. It parses flags and runs the component crates; nothing else
//! lives here.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use tokio_util::sync::CancellationToken;

mod control_plane;
mod member;

/// The global allocator: mimalloc. The API server, controllers, scheduler and simulated
/// kubelets allocate and free small objects (JSON values, label maps, strings) at a high
/// rate across threads; glibc's malloc spent about a quarter of the CPU of a 10,000-pod
/// rollout (`make bench-controllers`) in malloc/free and their consolidation.
/// (Feature `system-allocator` builds with the system's malloc instead, so that heap profilers
/// which interpose `malloc`, e.g. `heaptrack`, see every allocation.)
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options, which it reads only from the environment as the process loads: arenas
/// are committed as they are used instead of whole (`ARENA_EAGER_COMMIT=0`). Measured with
/// kbench against `capstan server` (issue 26): idle RSS 119 → 90 MB, holding 100k ConfigMaps
/// right after creating them 437 → 397 MB, creates/s unchanged. (`PURGE_DELAY=0` on top
/// saves another 10 MB there but cost about a tenth of the creates/s at 32 connections.)
const ALLOCATOR_OPTIONS: [(&str, &str); 1] = [("MIMALLOC_ARENA_EAGER_COMMIT", "0")];

/// Re-executes this binary (same pid, arguments and environment) with the
/// [`ALLOCATOR_OPTIONS`] that are not set yet (a value the user set is kept). Returns only
/// when that is impossible; the process then runs with mimalloc's defaults.
fn apply_allocator_options() {
    use std::os::unix::process::CommandExt;
    let missing: Vec<(&str, &str)> = ALLOCATOR_OPTIONS
        .into_iter()
        .filter(|(k, _)| std::env::var_os(k).is_none())
        .collect();
    if missing.is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut cmd = std::process::Command::new(&exe);
    if let Some(arg0) = args.next() {
        cmd.arg0(arg0);
    }
    cmd.args(args).envs(missing);
    let err = cmd.exec();
    eprintln!(
        "warning: allocator options not applied (re-executing {}: {err})",
        exe.display()
    );
}

/// Capstan: a Kubernetes control plane in one binary.
#[derive(Parser)]
#[command(name = "capstan", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one store member serving the etcd v3 gRPC API.
    Store(Box<StoreArgs>),
    /// Run the control plane in one process: an embedded store member and the Kubernetes
    /// API server over HTTPS; creates the PKI and an admin kubeconfig on first start.
    Server(Box<ServerArgs>),
    /// Run only the Kubernetes API server, on a remote store: a Capstan store cluster or an
    /// etcd cluster (`--etcd-servers`, as kube-apiserver); creates the PKI and an admin
    /// kubeconfig on first start.
    Apiserver(Box<ServerArgs>),
    /// Write a kubeconfig for a user with a client certificate signed by the cluster CA.
    Kubeconfig(KubeconfigArgs),
    /// Manage the cluster's PKI (`capstan certs init`).
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Save, inspect and restore store snapshots (etcdctl's and etcdutl's `snapshot`).
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// List, add, remove, update and promote store members (etcdctl's `member`).
    #[command(subcommand)]
    Member(member::MemberCommand),
    /// Run the scheduler against an API server (as kube-scheduler).
    Scheduler(ComponentArgs<scheduler::Options>),
    /// Run the controller manager's loops against an API server (as kube-controller-manager).
    Controllers(ComponentArgs<controllers::Options>),
    /// Run simulated nodes against an API server (as KWOK does).
    Nodes(ComponentArgs<nodes::Options>),
    /// Serve the resource metrics API (metrics.k8s.io) as an aggregated API server, as
    /// metrics-server does; it registers its APIService itself.
    MetricsServer(ComponentArgs<metrics_server::Options>),
}

/// Flags of a component that is an API client: its kubeconfig and its own flags.
#[derive(clap::Args)]
struct ComponentArgs<T: clap::Args> {
    /// Kubeconfig with the API server's address and this component's credentials.
    #[arg(long)]
    kubeconfig: PathBuf,
    #[command(flatten)]
    options: T,
}

/// `capstan certs …`.
#[derive(Subcommand)]
enum CertsCommand {
    /// Create the cluster CA, the service-account signing key, a serving certificate and the
    /// admin kubeconfig in a data directory (what `capstan server` does on first start). For a
    /// cluster of several servers, copy its `pki/ca.crt`, `pki/ca.key`, `pki/sa.key` and
    /// `pki/sa.pub` into each server's `<data-dir>/pki/` before their first start, as
    /// kubeadm's shared certificates.
    Init(CertsInitArgs),
    /// Issue a store member's peer certificate (serverAuth + clientAuth, SANs of its hosts)
    /// from the cluster CA, for `capstan store --peer-cert-file/--peer-key-file` with
    /// `https://` peer URLs. Writes `<out-dir>/peer.crt` and `<out-dir>/peer.key`.
    Peer(CertsPeerArgs),
    /// Issue a store member's serving certificate for its `https://` client URLs
    /// (serverAuth + clientAuth, SANs of its hosts) from the cluster CA, for `capstan store
    /// --cert-file/--key-file`. Writes `<out-dir>/server.crt` and `<out-dir>/server.key`.
    StoreServer(CertsPeerArgs),
    /// Issue a client certificate (CN = --name, clientAuth) from the cluster CA for the
    /// store's client URLs with `--client-cert-auth`: etcdctl's `--cert/--key`, capstan
    /// apiserver's `--etcd-certfile/--etcd-keyfile`. Writes `<out-dir>/<name>.crt` and
    /// `<out-dir>/<name>.key`.
    StoreClient(CertsClientArgs),
}

/// Flags of `capstan certs store-client`.
#[derive(clap::Args)]
struct CertsClientArgs {
    /// The data directory holding the cluster CA (`pki/ca.crt`, `pki/ca.key`).
    #[arg(long, default_value = ".capstan")]
    data_dir: PathBuf,
    /// The client's name (the certificate's CN).
    #[arg(long, default_value = "apiserver-etcd-client")]
    name: String,
    /// Where to write `<name>.crt` and `<name>.key`.
    #[arg(long)]
    out_dir: PathBuf,
}

/// Flags of `capstan certs peer`.
#[derive(clap::Args)]
struct CertsPeerArgs {
    /// The data directory holding the cluster CA (`pki/ca.crt`, `pki/ca.key`).
    #[arg(long, default_value = ".capstan")]
    data_dir: PathBuf,
    /// The member's name (the certificate's CN).
    #[arg(long)]
    name: String,
    /// Hosts (IPs or DNS names) of the member's peer (or client) URLs (comma-separated).
    #[arg(long, value_delimiter = ',')]
    hosts: Vec<String>,
    /// Where to write the certificate and key.
    #[arg(long)]
    out_dir: PathBuf,
}

/// `capstan snapshot …`, as `etcdctl snapshot save` and `etcdutl snapshot status|restore`.
#[derive(Subcommand)]
enum SnapshotCommand {
    /// Stream a snapshot of a live member's state into FILE.
    Save {
        /// Where to write the snapshot.
        file: PathBuf,
        /// The member to read from (http://IP:PORT, or https:// with the TLS flags).
        #[arg(long, default_value = "http://127.0.0.1:2379")]
        endpoints: String,
        /// `--cacert`, `--cert`, `--key` for an `https://` member.
        #[command(flatten)]
        tls: member::ClientTls,
    },
    /// Print a snapshot's hash, revision, key count and size.
    Status {
        /// The snapshot file.
        file: PathBuf,
        /// Output format: `simple`, `table` or `json`.
        #[arg(short = 'w', long = "write-out", default_value = "simple")]
        write_out: String,
    },
    /// Write the data directory of one member of a new cluster from a snapshot.
    Restore {
        /// The snapshot file.
        file: PathBuf,
        /// Accept a file without the integrity hash (a `*.snap` copied from a data dir).
        #[arg(long)]
        skip_hash_check: bool,
        /// The data directory to create (must not exist or be empty; default `<name>.capstan`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// The member's name, its peer URLs and the new cluster (`--initial-cluster` & co.).
        #[command(flatten)]
        member: Box<MemberArgs>,
    },
}

/// `capstan snapshot …`.
async fn run_snapshot(cmd: SnapshotCommand) -> anyhow::Result<()> {
    match cmd {
        SnapshotCommand::Save {
            file,
            endpoints,
            tls,
        } => {
            let endpoint = endpoints.split(',').next().unwrap_or_default().to_owned();
            let bytes = store::restore::save(&endpoint, &tls.dial(), &file).await?;
            eprintln!("Snapshot saved at {} ({bytes} bytes)", file.display());
            Ok(())
        }
        SnapshotCommand::Status { file, write_out } => {
            let snap = store::restore::read(&file, false)
                .or_else(|_| store::restore::read(&file, true))?;
            let st = store::restore::status(&snap)?;
            let hash = format!("{:08x}", st.hash);
            match write_out.as_str() {
                "json" => println!(
                    "{{\"hash\":{},\"revision\":{},\"totalKey\":{},\"totalSize\":{}}}",
                    st.hash, st.revision, st.total_keys, st.total_size
                ),
                "table" => {
                    let row = [
                        hash,
                        st.revision.to_string(),
                        st.total_keys.to_string(),
                        format!("{} B", st.total_size),
                    ];
                    let head = ["HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE"];
                    let w: Vec<usize> = head
                        .iter()
                        .zip(&row)
                        .map(|(h, r)| h.len().max(r.len()) + 2)
                        .collect();
                    let line: String = w
                        .iter()
                        .map(|n| format!("+{}", "-".repeat(*n)))
                        .collect::<String>()
                        + "+";
                    let cells = |cells: &[String]| -> String {
                        cells
                            .iter()
                            .zip(&w)
                            .map(|(c, n)| format!("|{c:^n$}"))
                            .collect::<String>()
                            + "|"
                    };
                    println!("{line}");
                    println!("{}", cells(&head.map(str::to_owned)));
                    println!("{line}");
                    println!("{}", cells(&row));
                    println!("{line}");
                }
                _ => println!(
                    "{hash}, {}, {}, {} B",
                    st.revision, st.total_keys, st.total_size
                ),
            }
            Ok(())
        }
        SnapshotCommand::Restore {
            file,
            skip_hash_check,
            data_dir,
            member,
        } => {
            let snap = store::restore::read(&file, skip_hash_check)?;
            let data_dir =
                data_dir.unwrap_or_else(|| PathBuf::from(format!("{}.capstan", member.name)));
            let cfg = (*member).into_config(data_dir.clone(), Vec::new());
            let ids = store::restore::restore(&cfg, &snap)?;
            eprintln!(
                "restored snapshot {} into {} (member {:x}, cluster {:x})",
                file.display(),
                data_dir.display(),
                ids.member_id,
                ids.cluster_id
            );
            Ok(())
        }
    }
}

/// Flags of `capstan certs init`.
#[derive(clap::Args)]
struct CertsInitArgs {
    /// The data directory to create the PKI in.
    #[arg(long, default_value = ".capstan")]
    data_dir: PathBuf,
    /// Extra subject alternative names (IPs or DNS names) of the serving certificate.
    #[arg(long = "apiserver-cert-extra-sans", value_delimiter = ',')]
    extra_sans: Vec<String>,
    /// API server URL written into the admin kubeconfig.
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    server: String,
}

/// Flags of `capstan kubeconfig`.
#[derive(clap::Args)]
struct KubeconfigArgs {
    /// The `capstan server` data directory holding the PKI.
    #[arg(long, default_value = ".capstan")]
    data_dir: PathBuf,
    /// User name (the certificate's CN).
    #[arg(long)]
    user: String,
    /// Groups (the certificate's O attributes); repeatable.
    #[arg(long = "group")]
    groups: Vec<String>,
    /// API server URL written into the kubeconfig.
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    server: String,
    /// Where to write the kubeconfig.
    #[arg(long)]
    out: PathBuf,
}

/// Flags of `capstan server`, named after kube-apiserver's.
#[derive(clap::Args)]
struct ServerArgs {
    /// Directory for the store, the PKI and the admin kubeconfig.
    #[arg(long, default_value = ".capstan")]
    data_dir: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: std::net::IpAddr,
    /// Port to serve HTTPS on.
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// Store on a remote etcd v3 cluster (a Capstan store cluster or etcd) instead of the
    /// embedded member: comma-separated client URLs (http://IP:PORT), as kube-apiserver's flag.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// CA certificates that verify the `https://` --etcd-servers.
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate presented to the `https://` --etcd-servers.
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    /// Private key of --etcd-certfile.
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
    /// Interval of store compaction (e.g. 5m, 30s; 0s disables).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    etcd_compaction_interval: Duration,
    /// How often Service cluster-IP and node-port reservations are checked against the
    /// Services (restoring missing ones, releasing unused ones after three passes; 0s
    /// disables).
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    service_repair_interval: Duration,
    /// Serve the web dashboard at /dashboard/ (default true for `capstan server`, false for
    /// `capstan apiserver`); it reads through the API with the user's token.
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    dashboard: Option<bool>,
    /// Static bearer tokens: CSV lines `token,user,uid,"group1,group2"`.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Serve requests without credentials as `system:anonymous` (RBAC decides); false: 401.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    anonymous_auth: bool,
    /// Private key that signs service-account tokens: RSA (PKCS#1 or PKCS#8 PEM; RS256
    /// tokens) or ECDSA P-256 (PKCS#8; ES256); default: the data directory's `pki/sa.key`,
    /// an ECDSA key generated on first start.
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,
    /// Keys that verify service-account tokens: PEM public keys, certificates or private
    /// keys, RSA or ECDSA P-256 (repeatable; default: `pki/sa.pub`).
    #[arg(long = "service-account-key-file")]
    service_account_key_files: Vec<PathBuf>,
    /// Issuer (`iss`) of service-account tokens.
    #[arg(long, default_value = apiserver::authn::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// Audiences the API accepts tokens for (comma-separated; default: the issuer).
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// Kubeconfig of a TokenReview webhook: bearer tokens the built-in authenticators do not
    /// accept are sent to it.
    #[arg(long)]
    authentication_token_webhook_config_file: Option<PathBuf>,
    /// How long the token webhook's answers are cached.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    authentication_token_webhook_cache_ttl: Duration,
    /// TokenReview version sent to the token webhook (v1 or v1beta1).
    #[arg(long, default_value = "v1")]
    authentication_token_webhook_version: String,
    /// OIDC issuer URL (https://): its ID tokens authenticate (keys from its discovery
    /// document).
    #[arg(long)]
    oidc_issuer_url: Option<String>,
    /// The audience (`aud`) OIDC tokens must carry.
    #[arg(long)]
    oidc_client_id: Option<String>,
    /// The claim holding the user name (default `sub`).
    #[arg(long)]
    oidc_username_claim: Option<String>,
    /// Put before user names (default `<issuer>#` unless the claim is `email`; `-`: none).
    #[arg(long)]
    oidc_username_prefix: Option<String>,
    /// The claim holding the groups (a string or a list of strings).
    #[arg(long)]
    oidc_groups_claim: Option<String>,
    /// Put before each group.
    #[arg(long)]
    oidc_groups_prefix: Option<String>,
    /// CA certificates that verify the issuer (default: the system's CAs).
    #[arg(long)]
    oidc_ca_file: Option<PathBuf>,
    /// A claim that must be present with this value (`key=value`, repeatable).
    #[arg(long = "oidc-required-claim")]
    oidc_required_claims: Vec<String>,
    /// AuthenticationConfiguration file (apiserver.config.k8s.io/v1 or v1beta1): JWT
    /// authenticators with claim mappings and CEL validation rules; excludes --oidc-*.
    #[arg(long)]
    authentication_config: Option<PathBuf>,
    /// Authorizers, in order (comma-separated: Node, RBAC, Webhook, AlwaysAllow,
    /// AlwaysDeny); default Node,RBAC as kubeadm sets it (upstream's own default is
    /// AlwaysAllow). `system:masters` is always allowed first.
    #[arg(long, value_delimiter = ',')]
    authorization_mode: Vec<String>,
    /// Kubeconfig of the SubjectAccessReview webhook of `--authorization-mode=…,Webhook`.
    #[arg(long)]
    authorization_webhook_config_file: Option<PathBuf>,
    /// SubjectAccessReview version sent to the authorization webhook (v1 or v1beta1;
    /// default v1).
    #[arg(long)]
    authorization_webhook_version: Option<String>,
    /// How long the authorization webhook's allowed answers are cached (default 5m).
    #[arg(long, value_parser = parse_duration)]
    authorization_webhook_cache_authorized_ttl: Option<Duration>,
    /// How long the authorization webhook's other answers are cached (default 30s).
    #[arg(long, value_parser = parse_duration)]
    authorization_webhook_cache_unauthorized_ttl: Option<Duration>,
    /// AuthorizationConfiguration file (apiserver.config.k8s.io/v1 or v1beta1): the
    /// authorizer chain, several webhooks with matchConditions and failure policies;
    /// excludes --authorization-mode and --authorization-webhook-*.
    #[arg(long)]
    authorization_config: Option<PathBuf>,
    /// Admission plugins to enable besides the defaults (comma-separated, upstream's names).
    #[arg(long, value_delimiter = ',')]
    enable_admission_plugins: Vec<String>,
    /// Admission plugins to disable, defaults included (comma-separated, upstream's names).
    #[arg(long, value_delimiter = ',')]
    disable_admission_plugins: Vec<String>,
    /// Audit policy (audit.k8s.io/v1 Policy, YAML or JSON); auditing needs it and
    /// `--audit-log-path`.
    #[arg(long)]
    audit_policy_file: Option<std::path::PathBuf>,
    /// Audit log file (`-`: standard output): one audit.k8s.io/v1 Event JSON per line.
    #[arg(long)]
    audit_log_path: Option<String>,
    /// Megabytes of audit log before it is rotated (0: 100, as upstream).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Rotated audit logs to keep (0: all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Days to keep rotated audit logs (0: forever).
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,
    /// Encryption at rest: an apiserver.config.k8s.io/v1 EncryptionConfiguration
    /// (providers `identity`, `aescbc`, `aesgcm` and `secretbox`).
    #[arg(long)]
    encryption_provider_config: Option<std::path::PathBuf>,
    /// Client certificate the API server presents to extension API servers (default: the
    /// data directory's `pki/front-proxy-client.crt`).
    #[arg(long)]
    proxy_client_cert_file: Option<PathBuf>,
    /// Key of `--proxy-client-cert-file` (default: `pki/front-proxy-client.key`).
    #[arg(long)]
    proxy_client_key_file: Option<PathBuf>,
    /// CA extension API servers trust request headers from (default:
    /// `pki/front-proxy-ca.crt`); published in `kube-system/extension-apiserver-authentication`.
    #[arg(long)]
    requestheader_client_ca_file: Option<PathBuf>,
    /// Common names allowed to send request headers (default: `front-proxy-client`).
    #[arg(long, value_delimiter = ',')]
    requestheader_allowed_names: Vec<String>,
    /// Headers carrying the user name.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-User")]
    requestheader_username_headers: Vec<String>,
    /// Headers carrying the groups.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Group")]
    requestheader_group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Extra-")]
    requestheader_extra_headers_prefix: Vec<String>,
    /// Simulated nodes to run in-process (0: none).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// How the in-process nodes run pods: `simulated` (default: no process runs) or
    /// `process` (containers' commands run on this host in their own mount and PID
    /// namespaces; each node serves the kubelet API for logs, exec and attach).
    #[arg(long, value_enum, default_value_t = nodes::Runtime::Simulated)]
    node_runtime: nodes::Runtime,
    /// Longest a deleted pod's grace period (preStop hook, then SIGTERM) is honoured by the
    /// in-process nodes before SIGKILL (e.g. `30s`: the kubelet honours it whole); short by
    /// default so deletions stay quick.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    node_max_grace: Duration,
    /// Do not run the scheduler in-process (as k3s' flag).
    #[arg(long)]
    disable_scheduler: bool,
    /// Do not run the metrics server (metrics.k8s.io through the aggregator) in-process.
    #[arg(long)]
    disable_metrics_server: bool,
    /// Do not run the local-path provisioner (and its default StorageClass `standard`)
    /// that gives the simulated nodes' claims volumes, as kind's does.
    #[arg(long)]
    disable_storage_provisioner: bool,
    /// Port of the in-process metrics server (0: any free port; its EndpointSlice names it).
    #[arg(long, default_value_t = 0)]
    metrics_server_port: u16,
    /// Do not run the controller manager in-process (as k3s' flag).
    #[arg(long)]
    disable_controller_manager: bool,
    /// Controllers the in-process controller manager runs (kube-controller-manager's shape:
    /// `*`, `name`, `-name`).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    controllers: Vec<String>,
    /// Register this server as a control-plane Node (tainted NoSchedule, as kubeadm) with
    /// mirror pods in kube-system for its components (`kube-apiserver-<node>`, `etcd-<node>`,
    /// `kube-scheduler-<node>`, `kube-controller-manager-<node>`; kubeadm's labels), their
    /// readiness following the components' health. On by default, as on a kubeadm cluster;
    /// `--control-plane-pods=false` turns it off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    control_plane_pods: bool,
    /// Addresses the in-process `service-lb` controller gives LoadBalancer Services (IPv4
    /// CIDR; default loopback, never routable).
    #[arg(long, default_value = "127.0.100.0/24")]
    service_lb_range: String,
    /// The in-process node lifecycle controller's `--node-monitor-grace-period` (e.g. `40s`).
    #[arg(long)]
    node_monitor_grace_period: Option<String>,
    /// The in-process HPA controller's `--horizontal-pod-autoscaler-sync-period` (e.g. `15s`).
    #[arg(long)]
    horizontal_pod_autoscaler_sync_period: Option<String>,
    /// The in-process HPA controller's `--horizontal-pod-autoscaler-downscale-stabilization`
    /// (e.g. `5m`; tests shorten it).
    #[arg(long)]
    horizontal_pod_autoscaler_downscale_stabilization: Option<String>,
    /// The in-process node lifecycle controller's `--node-startup-grace-period` (e.g. `1m`):
    /// how long a Node that never posted status waits before its conditions become Unknown.
    #[arg(long)]
    node_startup_grace_period: Option<String>,
    /// Comma-separated URLs on which the embedded store member also serves the etcd v3 API
    /// (https://IP:PORT or http://IP:PORT; default: none), as a stacked etcd member does.
    /// `https://` URLs serve the certificate `pki/etcd/server.crt` (issued from the cluster
    /// CA unless --cert-file is given) and require client certificates from the cluster CA
    /// (`pki/etcd/healthcheck-client.crt` is one) unless --client-cert-auth=false.
    #[arg(long, value_delimiter = ',')]
    listen_client_urls: Vec<String>,
    /// The embedded store member: with `--initial-cluster` it is one member of a store
    /// cluster whose other members are other `capstan server`s (the stacked topology) or
    /// `capstan store`s.
    #[command(flatten)]
    member: MemberArgs,
}

/// Flags of `capstan store`, named after etcd's.
#[derive(clap::Args)]
struct StoreArgs {
    /// Path to the data directory.
    #[arg(long, default_value = "default.capstan")]
    data_dir: PathBuf,
    /// Comma-separated URLs to serve clients on (http://IP:PORT or, with --cert-file and
    /// --key-file, https://IP:PORT).
    #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    listen_client_urls: Vec<String>,
    #[command(flatten)]
    member: MemberArgs,
}

/// Flags of a store member — its identity, its cluster, Raft timing and limits — shared by
/// `capstan store` and `capstan server` (whose embedded member joins a cluster with the same
/// flags: the stacked topology), named after etcd's.
#[derive(clap::Args)]
struct MemberArgs {
    /// Human-readable name of this member.
    #[arg(long, default_value = "default")]
    name: String,
    /// Comma-separated client URLs advertised to the cluster (default: the listen URLs).
    #[arg(long, value_delimiter = ',')]
    advertise_client_urls: Vec<String>,
    /// Comma-separated peer URLs advertised to the cluster.
    #[arg(long, default_value = "http://127.0.0.1:2380", value_delimiter = ',')]
    initial_advertise_peer_urls: Vec<String>,
    /// Applied entries between two snapshots of the state machine.
    #[arg(long, default_value_t = 100_000)]
    snapshot_count: u64,
    /// Entries kept in the log behind a snapshot for slow followers; a follower further
    /// behind is sent the snapshot.
    #[arg(
        long = "experimental-snapshot-catchup-entries",
        default_value_t = 5_000
    )]
    snapshot_catchup_entries: u64,
    /// Largest accepted request, in bytes.
    #[arg(long, default_value_t = 1_572_864)]
    max_request_bytes: usize,
    /// Largest number of operations in one transaction.
    #[arg(long, default_value_t = 128)]
    max_txn_ops: usize,
    /// Raft heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 100)]
    heartbeat_interval: u64,
    /// Raft election timeout in milliseconds.
    #[arg(long, default_value_t = 1000)]
    election_timeout: u64,
    /// Interval of watch progress notifications (e.g. 10m, 30s, 500ms).
    #[arg(long = "experimental-watch-progress-notify-interval", default_value = "10m", value_parser = parse_duration)]
    progress_notify_interval: Duration,
    /// Comma-separated URLs to accept peer (Raft) connections on (default: the advertised
    /// peer URLs when the cluster has several members).
    #[arg(long, value_delimiter = ',')]
    listen_peer_urls: Vec<String>,
    /// Initial cluster configuration for bootstrapping: `name=peer-url,...` (this member
    /// included). Ignored when the data directory already holds a member.
    #[arg(long, value_parser = parse_initial_cluster)]
    initial_cluster: Option<InitialCluster>,
    /// `new` when every member of --initial-cluster starts together, `existing` to join a
    /// running cluster.
    #[arg(long, default_value = "new", value_parser = ["new", "existing"])]
    initial_cluster_state: String,
    /// Token mixed into the member and cluster ids of a new cluster.
    #[arg(long, default_value = "etcd-cluster")]
    initial_cluster_token: String,
    /// Certificate this member presents to peers (https:// peer URLs).
    #[arg(long)]
    peer_cert_file: Option<PathBuf>,
    /// Private key of --peer-cert-file.
    #[arg(long)]
    peer_key_file: Option<PathBuf>,
    /// CA certificates that peer certificates must chain to.
    #[arg(long)]
    peer_trusted_ca_file: Option<PathBuf>,
    /// Comma-separated plain-HTTP URLs serving `/metrics` (etcd's metric names) and
    /// `/health` (http://IP:PORT; default: none).
    #[arg(long, value_delimiter = ',')]
    listen_metrics_urls: Vec<String>,
    /// Require peers to present a certificate signed by --peer-trusted-ca-file.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    peer_client_cert_auth: bool,
    /// Certificate served on `https://` client URLs.
    #[arg(long)]
    cert_file: Option<PathBuf>,
    /// Private key of --cert-file.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// CA certificates that client certificates must chain to.
    #[arg(long)]
    trusted_ca_file: Option<PathBuf>,
    /// Require clients to present a certificate signed by --trusted-ca-file (default false
    /// for `capstan store`, as etcd; true for `capstan server`'s https:// client URLs).
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    client_cert_auth: Option<bool>,
}

/// A parsed `--initial-cluster`.
#[derive(Clone, Debug)]
struct InitialCluster(Vec<store::config::InitialMember>);

fn parse_initial_cluster(s: &str) -> Result<InitialCluster, String> {
    store::config::parse_initial_cluster(s).map(InitialCluster)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!(
            "invalid duration unit in {s:?} (use ms, s, m or h)"
        )),
    }
}

impl StoreArgs {
    fn into_config(self) -> store::StoreConfig {
        self.member
            .into_config(self.data_dir, self.listen_client_urls)
    }
}

impl MemberArgs {
    /// The member's configuration with its data directory and client listeners.
    fn into_config(self, data_dir: PathBuf, listen_client_urls: Vec<String>) -> store::StoreConfig {
        let mut cfg = store::StoreConfig::new(self.name, data_dir);
        cfg.listen_client_urls = listen_client_urls;
        cfg.advertise_client_urls = self.advertise_client_urls;
        cfg.initial_advertise_peer_urls = self.initial_advertise_peer_urls;
        cfg.snapshot_count = self.snapshot_count;
        cfg.catch_up_entries = self.snapshot_catchup_entries;
        cfg.max_request_bytes = self.max_request_bytes;
        cfg.max_txn_ops = self.max_txn_ops;
        cfg.heartbeat_interval = Duration::from_millis(self.heartbeat_interval.max(1));
        cfg.election_timeout = Duration::from_millis(self.election_timeout.max(1));
        cfg.progress_notify_interval = self.progress_notify_interval.max(Duration::from_millis(1));
        cfg.listen_peer_urls = self.listen_peer_urls;
        cfg.initial_cluster = self.initial_cluster.map(|c| c.0).unwrap_or_default();
        cfg.initial_cluster_state = if self.initial_cluster_state == "existing" {
            store::config::ClusterState::Existing
        } else {
            store::config::ClusterState::New
        };
        cfg.initial_cluster_token = self.initial_cluster_token;
        cfg.listen_metrics_urls = self.listen_metrics_urls;
        cfg.peer_tls = store::config::PeerTls {
            cert_file: self.peer_cert_file,
            key_file: self.peer_key_file,
            trusted_ca_file: self.peer_trusted_ca_file,
            client_cert_auth: self.peer_client_cert_auth,
        };
        cfg.client_tls = store::config::ClientTls {
            cert_file: self.cert_file,
            key_file: self.key_file,
            trusted_ca_file: self.trusted_ca_file,
            client_cert_auth: self.client_cert_auth.unwrap_or(false),
        };
        cfg
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

/// Async worker threads: `$TOKIO_WORKER_THREADS` if set; else one per core when the process
/// hosts the whole cluster (`capstan server --nodes=N`: API server, controllers, scheduler
/// and simulated kubelets all compete for this runtime, and nothing else on the machine needs
/// a core); else one per core minus the core the Raft driver thread keeps busy (at least
/// one). On a 2-core machine one worker serves more API requests than two when the clients
/// run beside it: fewer context switches against the driver and the clients.
fn worker_threads(whole_cluster: bool) -> usize {
    if let Some(n) = std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if whole_cluster {
        cores
    } else {
        cores.saturating_sub(1).max(1)
    }
}

/// `capstan server`: PKI, embedded store member, API server.
async fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let server_url = format!("https://{}:{}", args.bind_address, args.secure_port);
    let member_name = args.member.name.clone();
    let pki = certs::ensure_pki(
        &args.data_dir,
        &[args.bind_address.to_string()],
        &server_url,
    )
    .with_context(|| format!("creating the PKI in {}", args.data_dir.display()))?;
    let (backend, local) = if args.etcd_servers.is_empty() {
        let mut member = args.member;
        secure_peers(&mut member, &pki)?;
        secure_clients(&mut member, &args.listen_client_urls, &pki)?;
        let store_cfg = member.into_config(args.data_dir.join("store"), args.listen_client_urls);
        let listeners = store::server::bind_clients(&store_cfg).await?;
        let (node, driver) = store::node::Node::start(&store_cfg)?;
        let etcd_api = store::server::ClientServers::spawn(&node, &store_cfg, listeners);
        let metrics = store::server::serve_metrics(&store_cfg, &node).await?;
        let expiry = tokio::spawn(store::server::expire_leases(node.clone()));
        let backend = store::backend::Backend::Local(node.clone());
        (
            backend,
            Some(LocalMember {
                node,
                driver,
                etcd_api,
                metrics,
                expiry,
            }),
        )
    } else {
        if args.member.initial_cluster.is_some() || !args.listen_client_urls.is_empty() {
            anyhow::bail!("--etcd-servers replaces the embedded store member: drop its flags");
        }
        let tls = store::transport::client_tls::DialTls {
            ca_file: args.etcd_cafile.clone(),
            cert_file: args.etcd_certfile.clone(),
            key_file: args.etcd_keyfile.clone(),
        };
        let remote =
            store::remote::RemoteStore::connect(&args.etcd_servers, &tls, Duration::from_secs(10))
                .await
                .with_context(|| {
                    format!(
                        "connecting to --etcd-servers {}",
                        args.etcd_servers.join(",")
                    )
                })?;
        tracing::info!(servers = %args.etcd_servers.join(","), "storing on a remote cluster");
        (store::backend::Backend::Remote(remote), None)
    };
    let api_cfg = apiserver::ApiServerConfig {
        bind_address: args.bind_address,
        secure_port: args.secure_port,
        tls_cert_file: pki.apiserver_cert.clone(),
        tls_private_key_file: pki.apiserver_key.clone(),
        client_ca_file: pki.ca_cert.clone(),
        compaction_interval: args.etcd_compaction_interval,
        service_repair_interval: args.service_repair_interval,
        authn: apiserver::authn::AuthnConfig {
            token_auth_file: args.token_auth_file,
            anonymous_auth: args.anonymous_auth,
            service_account_signing_key_file: Some(
                args.service_account_signing_key_file
                    .unwrap_or_else(|| pki.sa_key.clone()),
            ),
            service_account_key_files: if args.service_account_key_files.is_empty() {
                vec![pki.sa_pub.clone()]
            } else {
                args.service_account_key_files
            },
            service_account_issuer: args.service_account_issuer,
            api_audiences: args.api_audiences,
            token_webhook: args
                .authentication_token_webhook_config_file
                .map(
                    |config_file| apiserver::authn::webhook::TokenWebhookConfig {
                        config_file,
                        version: args.authentication_token_webhook_version,
                        cache_ttl: args.authentication_token_webhook_cache_ttl,
                    },
                ),
            oidc: apiserver::authn::oidc_config::OidcFlags {
                issuer_url: args.oidc_issuer_url,
                client_id: args.oidc_client_id,
                username_claim: args.oidc_username_claim,
                username_prefix: args.oidc_username_prefix,
                groups_claim: args.oidc_groups_claim,
                groups_prefix: args.oidc_groups_prefix,
                ca_file: args.oidc_ca_file,
                required_claims: args.oidc_required_claims,
            },
            authentication_config: args.authentication_config,
        },
        authz: {
            let defaults = apiserver::authz::webhook::WebhookOptions::default();
            let webhook_flags_set = args.authorization_webhook_version.is_some()
                || args.authorization_webhook_cache_authorized_ttl.is_some()
                || args.authorization_webhook_cache_unauthorized_ttl.is_some();
            apiserver::authz::AuthzConfig {
                modes: args.authorization_mode,
                webhook_config_file: args.authorization_webhook_config_file,
                webhook: apiserver::authz::webhook::WebhookOptions {
                    version: args
                        .authorization_webhook_version
                        .unwrap_or(defaults.version.clone()),
                    authorized_ttl: args
                        .authorization_webhook_cache_authorized_ttl
                        .unwrap_or(defaults.authorized_ttl),
                    unauthorized_ttl: args
                        .authorization_webhook_cache_unauthorized_ttl
                        .unwrap_or(defaults.unauthorized_ttl),
                    ..defaults
                },
                webhook_flags_set,
                authorization_config: args.authorization_config,
            }
        },
        audit: apiserver::audit::AuditConfig {
            policy_file: args.audit_policy_file,
            log_path: args.audit_log_path,
            log_max_size_mb: args.audit_log_maxsize,
            log_max_backups: args.audit_log_maxbackup,
            log_max_age_days: args.audit_log_maxage,
        },
        encryption_provider_config: args.encryption_provider_config,
        dashboard: args.dashboard.unwrap_or(true),
        admission: apiserver::admission::AdmissionConfig {
            enable: args.enable_admission_plugins,
            disable: args.disable_admission_plugins,
        },
        aggregator: {
            let front_proxy = certs::FrontProxyPaths::new(&pki.pki_dir);
            apiserver::aggregator::AggregatorConfig {
                proxy_client_cert_file: Some(
                    args.proxy_client_cert_file
                        .unwrap_or(front_proxy.client_cert),
                ),
                proxy_client_key_file: Some(
                    args.proxy_client_key_file.unwrap_or(front_proxy.client_key),
                ),
                requestheader_client_ca_file: Some(
                    args.requestheader_client_ca_file
                        .unwrap_or(front_proxy.ca_cert),
                ),
                requestheader_allowed_names: if args.requestheader_allowed_names.is_empty() {
                    vec![certs::FRONT_PROXY_CLIENT_NAME.to_owned()]
                } else {
                    args.requestheader_allowed_names
                },
                requestheader_username_headers: args.requestheader_username_headers,
                requestheader_group_headers: args.requestheader_group_headers,
                requestheader_extra_headers_prefix: args.requestheader_extra_headers_prefix,
            }
        },
    };
    tracing::info!(kubeconfig = %pki.admin_kubeconfig.display(), "admin kubeconfig written");
    configure_kubelet_client(&pki)?;
    let components = CancellationToken::new();
    let mut tasks = Vec::new();
    if !args.disable_scheduler {
        let kubeconfig = component_kubeconfig(&pki, "scheduler", SCHEDULER_USER, &server_url)?;
        tasks.push(spawn_component(
            "scheduler",
            &kubeconfig,
            &components,
            |c, t| scheduler::run(c, scheduler::Options::default(), t),
        ));
    }
    if !args.disable_controller_manager {
        let kubeconfig = component_kubeconfig(
            &pki,
            "controller-manager",
            CONTROLLER_MANAGER_USER,
            &server_url,
        )?;
        let options = controllers::Options {
            controllers: args.controllers.clone(),
            kubeconfig: Some(kubeconfig.clone()),
            // The cluster CA signs approved CSRs (kubeadm's --cluster-signing-*-file).
            cluster_signing_cert_file: Some(pki.ca_cert.clone()),
            cluster_signing_key_file: Some(pki.ca_key.clone()),
            ..controllers::Options::default()
        };
        let mut options = options;
        options.service_lb_range = args.service_lb_range.clone();
        if let Some(g) = &args.node_monitor_grace_period {
            options.node_monitor_grace_period =
                controllers::parse_duration(g).map_err(anyhow::Error::msg)?;
        }
        if let Some(p) = &args.horizontal_pod_autoscaler_sync_period {
            options.horizontal_pod_autoscaler_sync_period =
                controllers::parse_duration(p).map_err(anyhow::Error::msg)?;
        }
        if let Some(w) = &args.horizontal_pod_autoscaler_downscale_stabilization {
            options.horizontal_pod_autoscaler_downscale_stabilization =
                controllers::parse_duration(w).map_err(anyhow::Error::msg)?;
        }
        if let Some(g) = &args.node_startup_grace_period {
            options.node_startup_grace_period =
                controllers::parse_duration(g).map_err(anyhow::Error::msg)?;
        }
        tasks.push(spawn_component(
            "controllers",
            &kubeconfig,
            &components,
            |c, t| controllers::run(c, options, t),
        ));
    }
    if !args.disable_metrics_server {
        // It registers its Service, EndpointSlice and APIService itself, as applying
        // metrics-server's manifest does: the admin's group.
        let kubeconfig = pki.dir.join("metrics-server.kubeconfig");
        certs::write_user_kubeconfig(
            &pki,
            METRICS_SERVER_USER,
            &[certs::MASTERS_GROUP.to_owned()],
            &server_url,
            &kubeconfig,
        )?;
        let options = metrics_server::Options {
            bind_address: args.bind_address,
            secure_port: args.metrics_server_port,
            tls_cert_file: Some(pki.apiserver_cert.clone()),
            tls_private_key_file: Some(pki.apiserver_key.clone()),
            ..metrics_server::Options::default()
        };
        tasks.push(spawn_component(
            "metrics-server",
            &kubeconfig,
            &components,
            |c, t| metrics_server::run(c, options, t),
        ));
    }
    if args.nodes > 0 {
        let kubeconfig = component_kubeconfig(&pki, "nodes", NODE_FLEET_USER, &server_url)?;
        #[allow(clippy::needless_update)] // the other flags keep their defaults
        let options = nodes::Options {
            count: args.nodes,
            runtime: args.node_runtime,
            max_grace: args.node_max_grace,
            runtime_dir: args.data_dir.join("nodes"),
            pki_dir: Some(pki.pki_dir.clone()),
            api_server_url: Some(server_url.clone()),
            ..nodes::Options::default()
        };
        tasks.push(spawn_component(
            "nodes",
            &kubeconfig,
            &components,
            |c, t| nodes::run(c, options, t),
        ));
    }
    if args.nodes > 0 && !args.disable_storage_provisioner {
        let kubeconfig = component_kubeconfig(
            &pki,
            "local-path-provisioner",
            STORAGE_PROVISIONER_USER,
            &server_url,
        )?;
        tasks.push(spawn_component(
            "local-path-provisioner",
            &kubeconfig,
            &components,
            nodes::provisioner::run,
        ));
    }
    if args.control_plane_pods {
        let options = control_plane::Options {
            node_name: if member_name == "default" {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_lowercase())
                    .unwrap_or_else(|_| "capstan".to_owned())
            } else {
                member_name.clone()
            },
            address: args.bind_address.to_string(),
            embedded_store: local.is_some(),
            scheduler: !args.disable_scheduler,
            controller_manager: !args.disable_controller_manager,
        };
        tasks.push(spawn_component(
            "control-plane-pods",
            &pki.admin_kubeconfig,
            &components,
            |c, t| control_plane::run(c, options, t),
        ));
    }
    let driver_died = async {
        match &local {
            Some(l) => {
                while !l.driver.is_finished() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        r = apiserver::run(api_cfg, backend, shutdown_signal()) => r.map_err(anyhow::Error::from),
        () = driver_died => Err(anyhow::anyhow!("the store stopped")),
    };
    components.cancel();
    for task in tasks {
        let _ = task.await;
    }
    let Some(local) = local else {
        return result;
    };
    local.expiry.abort();
    for m in local.metrics {
        m.abort();
    }
    local.node.stop();
    local.etcd_api.stop().await;
    let driver = local.driver;
    let driver_result = tokio::task::spawn_blocking(move || driver.join()).await?;
    result?;
    driver_result.map_err(anyhow::Error::from)
}

/// The embedded store member of `capstan server` and what runs around it.
struct LocalMember {
    node: store::node::Node,
    driver: store::node::DriverHandle,
    etcd_api: store::server::ClientServers,
    metrics: Vec<tokio::task::JoinHandle<()>>,
    expiry: tokio::task::JoinHandle<()>,
}

/// `capstan server`'s store member talks to its peers over mutually authenticated TLS only:
/// when it is one member of a cluster (`--initial-cluster` with several members), every peer
/// URL must be `https://`, and unless `--peer-cert-file` is given it presents a peer
/// certificate issued from the cluster CA for the hosts of its peer URLs (`pki/peer.crt`),
/// trusts that CA, and requires peers' client certificates (etcd's
/// `--peer-client-cert-auth`).
fn secure_peers(member: &mut MemberArgs, pki: &certs::PkiPaths) -> anyhow::Result<()> {
    let Some(cluster) = &member.initial_cluster else {
        return Ok(());
    };
    if cluster.0.len() < 2 {
        return Ok(());
    }
    let own: Vec<&String> = member
        .initial_advertise_peer_urls
        .iter()
        .chain(&member.listen_peer_urls)
        .collect();
    let all = own
        .iter()
        .copied()
        .chain(cluster.0.iter().flat_map(|m| m.peer_urls.iter()));
    for url in all {
        if !url.starts_with("https://") {
            anyhow::bail!(
                "peer URL {url:?}: capstan server's store members talk over TLS only; use https:// peer URLs"
            );
        }
    }
    if member.peer_cert_file.is_none() {
        let hosts: Vec<String> = own.iter().filter_map(|u| url_host(u)).collect();
        let (cert, key) = certs::ensure_peer_cert(pki, &member.name, &hosts, &pki.pki_dir)?;
        member.peer_cert_file = Some(cert);
        member.peer_key_file = Some(key);
        member.peer_client_cert_auth = true;
    }
    if member.peer_trusted_ca_file.is_none() {
        member.peer_trusted_ca_file = Some(pki.ca_cert.clone());
    }
    Ok(())
}

/// `capstan server`'s `https://` client URLs serve TLS with client authentication by
/// default: unless `--cert-file` is given, a serving certificate issued from the cluster CA
/// for the hosts of its client URLs (`pki/etcd/server.crt`), client certificates required
/// (`--client-cert-auth`, default true here) and checked against the cluster CA unless
/// `--trusted-ca-file` is given; `pki/etcd/healthcheck-client.crt` is issued for etcdctl.
/// `http://` client URLs stay plain text (logged).
fn secure_clients(
    member: &mut MemberArgs,
    listen_client_urls: &[String],
    pki: &certs::PkiPaths,
) -> anyhow::Result<()> {
    for url in listen_client_urls
        .iter()
        .filter(|u| u.starts_with("http://"))
    {
        tracing::warn!(%url, "serving the etcd API without TLS: use an https:// client URL");
    }
    if !listen_client_urls.iter().any(|u| u.starts_with("https://")) {
        return Ok(());
    }
    let etcd_dir = pki.pki_dir.join("etcd");
    if member.cert_file.is_none() {
        let hosts: Vec<String> = listen_client_urls
            .iter()
            .chain(&member.advertise_client_urls)
            .filter_map(|u| url_host(u))
            .collect();
        let (cert, key) = certs::ensure_store_server_cert(pki, &member.name, &hosts, &etcd_dir)?;
        member.cert_file = Some(cert);
        member.key_file = Some(key);
    }
    if member.trusted_ca_file.is_none() {
        member.trusted_ca_file = Some(pki.ca_cert.clone());
    }
    if member.client_cert_auth.is_none() {
        member.client_cert_auth = Some(true);
    }
    certs::ensure_store_client_cert(pki, "healthcheck-client", &etcd_dir)?;
    Ok(())
}

/// The host of `scheme://host:port[/…]` (without brackets for IPv6).
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
    )
}

/// The user the in-process scheduler authenticates as (kube-scheduler's).
const SCHEDULER_USER: &str = "system:kube-scheduler";
/// The user the in-process controller manager authenticates as (kube-controller-manager's).
const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";
/// The user the in-process metrics server connects as.
const METRICS_SERVER_USER: &str = "system:metrics-server";
/// Gives the API server its kubelet client certificate (issued in memory from the cluster
/// CA at each start), so it can reach process nodes' kubelets for logs, exec and attach.
fn configure_kubelet_client(pki: &certs::PkiPaths) -> anyhow::Result<()> {
    let ca = certs::CertificateAuthority::load(&pki.ca_cert, &pki.ca_key)?;
    let client = certs::issue_client_cert(&ca, "kube-apiserver-kubelet-client", &[])?;
    apiserver::handlers::kubelet_proxy::configure(ca.cert_pem(), &client.cert_pem, &client.key_pem)
        .map_err(anyhow::Error::msg)
}

/// The user the in-process local-path provisioner connects as (bound to upstream's
/// `system:persistent-volume-provisioner` role).
const STORAGE_PROVISIONER_USER: &str = "system:capstan:local-path-provisioner";
/// The user the in-process simulated nodes connect as; it impersonates `system:node:<name>`
/// for each node's own requests.
const NODE_FLEET_USER: &str = "system:capstan:node-fleet";

/// Issues a client certificate for `user` and writes `<data-dir>/<name>.kubeconfig` for an
/// in-process component (new each start, so it never outlives the CA).
fn component_kubeconfig(
    pki: &certs::PkiPaths,
    name: &str,
    user: &str,
    server_url: &str,
) -> anyhow::Result<PathBuf> {
    let out = pki.dir.join(format!("{name}.kubeconfig"));
    certs::write_user_kubeconfig(pki, user, &[], server_url, &out)?;
    Ok(out)
}

/// The program name upstream's counterpart of an in-process component sends in its
/// User-Agent (and so the manager its writes are recorded under).
fn upstream_program(component: &str) -> &'static str {
    match component {
        "scheduler" => "kube-scheduler",
        "controllers" => "kube-controller-manager",
        "nodes" | "control-plane-pods" => "kubelet",
        "metrics-server" => "metrics-server",
        "local-path-provisioner" => "local-path-provisioner",
        _ => "capstan",
    }
}

/// A kube-rs client from a kubeconfig file (its current context), sending the User-Agent
/// of `component`'s upstream counterpart.
async fn client_from_kubeconfig(
    path: &std::path::Path,
    component: &str,
) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .with_context(|| format!("loading {}", path.display()))?;
    let mut config = config;
    controllers::client::set_user_agent(&mut config, upstream_program(component), None);
    controllers::client::http2_client(&config)
}

/// Starts an in-process component once the API server answers: it runs `run` with a client
/// from `kubeconfig` until `shutdown` is cancelled. A component that fails is logged; the
/// server keeps serving.
fn spawn_component<F, Fut>(
    name: &'static str,
    kubeconfig: &std::path::Path,
    shutdown: &CancellationToken,
    run: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnOnce(kube::Client, CancellationToken) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let kubeconfig = kubeconfig.to_path_buf();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let client = match client_from_kubeconfig(&kubeconfig, name).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(component = name, error = %format!("{e:#}"), "cannot start");
                return;
            }
        };
        // Wait for the API server to serve (it starts listening in the same process).
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            if client.apiserver_version().await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::info!(component = name, "starting");
        if let Err(e) = run(client, shutdown).await {
            tracing::error!(component = name, error = %format!("{e:#}"), "stopped with an error");
        }
    })
}

/// Runs a component given a kubeconfig, until SIGINT/SIGTERM.
async fn run_component<F, Fut>(
    component: &str,
    kubeconfig: &std::path::Path,
    run: F,
) -> anyhow::Result<()>
where
    F: FnOnce(kube::Client, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let client = client_from_kubeconfig(kubeconfig, component).await?;
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        trigger.cancel();
    });
    run(client, shutdown).await
}

/// Runs a server as a task on the runtime's worker threads instead of on the main thread
/// (`block_on`'s): what it builds at start-up and keeps then shares the workers' allocator
/// pages rather than filling pages of a thread that otherwise sleeps (issue 26: idle RSS).
async fn on_worker(
    server: impl Future<Output = anyhow::Result<()>> + Send + 'static,
) -> anyhow::Result<()> {
    tokio::spawn(server)
        .await
        .map_err(|e| anyhow::anyhow!("the server task failed: {e}"))?
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    apply_allocator_options();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CAPSTAN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,raft=warn")),
        )
        .init();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let whole_cluster = matches!(&cli.command, Command::Server(a) if a.nodes > 0);
    builder.worker_threads(worker_threads(whole_cluster));
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Store(args) => store::server::run((*args).into_config(), shutdown_signal())
                .await
                .map_err(anyhow::Error::from),
            Command::Server(args) => on_worker(run_server(*args)).await,
            Command::Apiserver(mut args) => {
                if args.etcd_servers.is_empty() {
                    Err(anyhow::anyhow!(
                        "capstan apiserver needs --etcd-servers (capstan server embeds a store)"
                    ))
                } else {
                    args.nodes = 0;
                    args.disable_scheduler = true;
                    args.disable_controller_manager = true;
                    args.dashboard = Some(args.dashboard.unwrap_or(false));
                    run_server(*args).await
                }
            }
            Command::Scheduler(a) => {
                run_component("scheduler", &a.kubeconfig, |c, t| {
                    scheduler::run(c, a.options, t)
                })
                .await
            }
            Command::Controllers(a) => {
                let mut options = a.options;
                options.kubeconfig = Some(a.kubeconfig.clone());
                run_component("controllers", &a.kubeconfig, |c, t| {
                    controllers::run(c, options, t)
                })
                .await
            }
            Command::Nodes(a) => {
                run_component("nodes", &a.kubeconfig, |c, t| nodes::run(c, a.options, t)).await
            }
            Command::MetricsServer(a) => {
                run_component("metrics-server", &a.kubeconfig, |c, t| {
                    metrics_server::run(c, a.options, t)
                })
                .await
            }
            Command::Certs(CertsCommand::Init(args)) => {
                let pki = certs::ensure_pki(&args.data_dir, &args.extra_sans, &args.server)?;
                println!(
                    "[certs] CA, service-account key and admin kubeconfig in {}",
                    pki.dir.display()
                );
                Ok(())
            }
            Command::Certs(CertsCommand::Peer(args)) => {
                let paths = certs::PkiPaths::new(&args.data_dir);
                let (cert, key) =
                    certs::ensure_peer_cert(&paths, &args.name, &args.hosts, &args.out_dir)?;
                println!(
                    "[certs] peer certificate {} and key {}",
                    cert.display(),
                    key.display()
                );
                Ok(())
            }
            Command::Certs(CertsCommand::StoreServer(args)) => {
                let paths = certs::PkiPaths::new(&args.data_dir);
                let (cert, key) = certs::ensure_store_server_cert(
                    &paths,
                    &args.name,
                    &args.hosts,
                    &args.out_dir,
                )?;
                println!(
                    "[certs] store serving certificate {} and key {}",
                    cert.display(),
                    key.display()
                );
                Ok(())
            }
            Command::Certs(CertsCommand::StoreClient(args)) => {
                let paths = certs::PkiPaths::new(&args.data_dir);
                let (cert, key) =
                    certs::ensure_store_client_cert(&paths, &args.name, &args.out_dir)?;
                println!(
                    "[certs] store client certificate {} and key {}",
                    cert.display(),
                    key.display()
                );
                Ok(())
            }
            Command::Snapshot(cmd) => run_snapshot(cmd).await,
            Command::Member(cmd) => member::run(cmd).await,
            Command::Kubeconfig(args) => {
                let paths = certs::PkiPaths::new(&args.data_dir);
                certs::write_user_kubeconfig(
                    &paths,
                    &args.user,
                    &args.groups,
                    &args.server,
                    &args.out,
                )
                .map_err(anyhow::Error::from)
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
