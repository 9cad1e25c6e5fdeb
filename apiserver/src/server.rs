//! The HTTPS server: rustls (HTTP/2 and HTTP/1.1 by ALPN, optional client certificates
//! verified against the cluster CA), the router, and the tier-1 pipeline in request order.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::net::TcpListener;
use tower::ServiceExt as _;

use crate::discovery;
use crate::handlers::{self, Ctx};
use crate::metrics::Metrics;
use crate::pipeline::{self, Authorizer, PeerIdentity, UserInfo};

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// Address to bind (`--bind-address`).
    pub bind_address: std::net::IpAddr,
    /// Port (`--secure-port`).
    pub secure_port: u16,
    /// Serving certificate, PEM (`--tls-cert-file`).
    pub tls_cert_file: PathBuf,
    /// Serving key, PEM (`--tls-private-key-file`).
    pub tls_private_key_file: PathBuf,
    /// CA that signs client certificates, PEM (`--client-ca-file`).
    pub client_ca_file: PathBuf,
    /// How often store history is compacted (`--etcd-compaction-interval`; zero disables).
    pub compaction_interval: std::time::Duration,
    /// How often Service address reservations are checked against the Services
    /// (`--service-repair-interval`; zero disables): upstream's repair controllers run
    /// every 3 minutes.
    pub service_repair_interval: std::time::Duration,
    /// Token, service-account and anonymous authentication flags.
    pub authn: crate::authn::AuthnConfig,
    /// `--authorization-mode` and the authorization webhook flags.
    pub authz: crate::authz::AuthzConfig,
    /// Audit policy and log flags (`--audit-policy-file`, `--audit-log-*`).
    pub audit: crate::audit::AuditConfig,
    /// `--encryption-provider-config`: the EncryptionConfiguration of values at rest.
    pub encryption_provider_config: Option<PathBuf>,
    /// `--enable-admission-plugins` / `--disable-admission-plugins`.
    pub admission: crate::admission::AdmissionConfig,
    /// API aggregation: `--proxy-client-*` and `--requestheader-*`.
    pub aggregator: crate::aggregator::AggregatorConfig,
    /// Serve the web dashboard's static files at `/dashboard/` (`--dashboard`).
    pub dashboard: bool,
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The admission flags were refused.
    #[error("admission: {0}")]
    Admission(String),
    /// The token file or a service-account key could not be loaded.
    #[error("authentication: {0}")]
    Authn(String),
    /// The authorization flags were refused.
    #[error("authorization: {0}")]
    Authz(String),
    /// A certificate or key could not be read.
    #[error("reading {path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// TLS configuration was refused.
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// The audit policy or log could not be loaded or opened.
    #[error("audit: {0}")]
    Audit(String),
    /// The aggregation flags were refused.
    #[error("aggregation: {0}")]
    Aggregator(String),
    /// The encryption configuration could not be loaded.
    #[error("encryption at rest: {0}")]
    Encryption(String),
    /// The port could not be bound.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The TLS configuration, and the client-CA verifier the accept loop judges client
/// certificates with.
type TlsSetup = (
    rustls::ServerConfig,
    Arc<dyn rustls::server::danger::ClientCertVerifier>,
);

fn tls_config(cfg: &ApiServerConfig) -> Result<TlsSetup, Error> {
    let pem_err = |path: &PathBuf| {
        let path = path.clone();
        move |e: rustls::pki_types::pem::Error| Error::Pem {
            path,
            reason: e.to_string(),
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cfg.tls_cert_file)
        .map_err(pem_err(&cfg.tls_cert_file))?
        .collect::<Result<_, _>>()
        .map_err(pem_err(&cfg.tls_cert_file))?;
    let key = PrivateKeyDer::from_pem_file(&cfg.tls_private_key_file)
        .map_err(pem_err(&cfg.tls_private_key_file))?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in
        CertificateDer::pem_file_iter(&cfg.client_ca_file).map_err(pem_err(&cfg.client_ca_file))?
    {
        let ca = ca.map_err(pem_err(&cfg.client_ca_file))?;
        roots.add(ca).map_err(|e| Error::Tls(e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| Error::Tls(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_client_cert_verifier(Arc::new(ClientCerts(Arc::clone(&verifier))))
        .with_single_cert(certs, key)
        .map_err(|e| Error::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, verifier))
}

/// The handshake's client-certificate policy, as Go's `tls.RequestClientCert` in
/// kube-apiserver: a certificate is asked for but not judged during the handshake (its
/// possession is still proven by the handshake signature); the accept loop verifies the chain
/// against the client CA afterwards, and a certificate that fails makes the connection's
/// requests 401 (upstream's x509 authenticator error) instead of a TLS alert.
#[derive(Debug)]
struct ClientCerts(Arc<dyn rustls::server::danger::ClientCertVerifier>);

impl rustls::server::danger::ClientCertVerifier for ClientCerts {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The identity of a connection's client certificate chain: verified against the client CA
/// by `verifier`, then read (CN = user, O = groups); `Err` when it does not verify.
fn peer_identity(
    verifier: &dyn rustls::server::danger::ClientCertVerifier,
    chain: Option<&[CertificateDer<'static>]>,
) -> Result<Option<UserInfo>, String> {
    let Some((leaf, intermediates)) = chain.and_then(<[_]>::split_first) else {
        return Ok(None);
    };
    verifier
        .verify_client_cert(leaf, intermediates, rustls::pki_types::UnixTime::now())
        .map_err(|e| format!("verifying certificate: {e}"))?;
    let (name, groups) = certs::identity_from_der(leaf.as_ref()).map_err(|e| e.to_string())?;
    Ok(Some(UserInfo {
        name,
        groups,
        ..UserInfo::default()
    }))
}

/// The version this server reports (kubectl's dispatcher picks its kubectl by the minor).
pub fn version_info() -> serde_json::Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0+capstan",
        "gitCommit": env!("CARGO_PKG_VERSION"),
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "n/a (rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}

/// `GET /version` as upstream's `WriteRawJSON` writes `version.Info`: JSON whatever the
/// Accept header says, `json.MarshalIndent` (struct order, two-space indent, no newline).
async fn version() -> Response {
    use crate::codec::ordered::Ordered;
    let info = version_info();
    let doc = Ordered::object(
        [
            "major",
            "minor",
            "gitVersion",
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ]
        .into_iter()
        .map(|k| (k, Ordered::Value(info[k].clone())))
        .collect(),
    );
    let body = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    ([(http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// How long the `etcd` health check waits for the store (upstream's
/// `--etcd-healthcheck-timeout` default).
const ETCD_HEALTHCHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Post-start hooks kube-apiserver v1.33 lists on its health endpoints; Capstan does the
/// equivalent work before it serves, so once it serves they have passed.
const POST_START_HOOKS: &[&str] = &[
    "start-apiserver-admission-initializer",
    "generic-apiserver-start-informers",
    "priority-and-fairness-config-consumer",
    "priority-and-fairness-filter",
    "storage-object-count-tracker-hook",
    "start-apiextensions-informers",
    "start-apiextensions-controllers",
    "crd-informer-synced",
    "start-system-namespaces-controller",
    "start-cluster-authentication-info-controller",
    "start-kube-apiserver-identity-lease-controller",
    "start-kube-apiserver-identity-lease-garbage-collector",
    "start-legacy-token-tracking-controller",
    "start-service-ip-repair-controllers",
    "rbac/bootstrap-roles",
    "scheduling/bootstrap-system-priority-classes",
    "priority-and-fairness-config-producer",
    "bootstrap-controller",
    "start-kubernetes-service-cidr-controller",
    "aggregator-reload-proxy-client-cert",
    "start-kube-aggregator-informers",
    "apiservice-status-local-available-controller",
    "apiservice-status-remote-available-controller",
    "apiservice-registration-controller",
    "apiservice-discovery-controller",
    "kube-apiserver-autoregistration",
];

/// The checks of `/healthz`, `/livez` or `/readyz`, in upstream's order: `ping`, `log`,
/// `etcd` (`etcd-readiness` and `informer-sync` on readyz), the post-start hooks,
/// `autoregister-completion`, the OpenAPI controllers, and `shutdown` on readyz.
fn health_checks(endpoint: &str, etcd_ok: bool) -> Vec<(String, bool)> {
    let readyz = endpoint == "readyz";
    let mut checks = vec![
        ("ping".to_owned(), true),
        ("log".to_owned(), true),
        ("etcd".to_owned(), etcd_ok),
    ];
    if readyz {
        checks.push(("etcd-readiness".to_owned(), etcd_ok));
        checks.push(("informer-sync".to_owned(), true));
    }
    checks.extend(
        POST_START_HOOKS
            .iter()
            .map(|h| (format!("poststarthook/{h}"), true)),
    );
    checks.push(("autoregister-completion".to_owned(), true));
    checks.push((
        "poststarthook/apiservice-openapi-controller".to_owned(),
        true,
    ));
    checks.push((
        "poststarthook/apiservice-openapiv3-controller".to_owned(),
        true,
    ));
    if readyz {
        checks.push(("shutdown".to_owned(), true));
    }
    checks
}

/// `/healthz`, `/livez`, `/readyz` (and `/<endpoint>/<check>`) with `?verbose` and
/// `?exclude=<check>` (upstream's check-list format). The `etcd` check is real: a
/// linearizable read through the store (a member cut off from its cluster's quorum fails it,
/// so a load balancer stops sending it requests), with upstream's body and 500 when a check
/// fails.
async fn health(State(ctx): State<Arc<Ctx>>, req: Request) -> Response {
    let path = req.uri().path().trim_start_matches('/').to_owned();
    let (endpoint, single) = match path.split_once('/') {
        Some((e, c)) => (e.to_owned(), Some(c.to_owned())),
        None => (path.clone(), None),
    };
    let params: Vec<(String, String)> = req
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (p.to_owned(), String::new()),
        })
        .collect();
    let verbose = params.iter().any(|(k, _)| k == "verbose");
    let excluded: Vec<&str> = params
        .iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.as_str())
        .collect();
    let etcd_ok = matches!(
        tokio::time::timeout(
            ETCD_HEALTHCHECK_TIMEOUT,
            ctx.storage.linearizable_revision()
        )
        .await,
        Ok(Ok(_))
    );
    let checks = health_checks(&endpoint, etcd_ok);
    let text = [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if let Some(check) = single {
        return match checks.iter().find(|(c, _)| *c == check) {
            Some((_, true)) => (StatusCode::OK, text, "ok").into_response(),
            Some((_, false)) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                text,
                "internal server error: reason withheld\n",
            )
                .into_response(),
            None => (StatusCode::NOT_FOUND, text, "404 page not found\n").into_response(),
        };
    }
    let healthy = checks
        .iter()
        .all(|(c, ok)| *ok || excluded.contains(&c.as_str()));
    if healthy && !verbose {
        return (StatusCode::OK, text, "ok").into_response();
    }
    let mut body: String = checks
        .iter()
        .map(|(c, ok)| {
            if excluded.contains(&c.as_str()) {
                format!("[+]{c} excluded: ok\n")
            } else if *ok {
                format!("[+]{c} ok\n")
            } else {
                format!("[-]{c} failed: reason withheld\n")
            }
        })
        .collect();
    if healthy {
        body.push_str(&format!("{endpoint} check passed\n"));
        (StatusCode::OK, text, body).into_response()
    } else {
        body.push_str(&format!("{endpoint} check failed\n"));
        (StatusCode::INTERNAL_SERVER_ERROR, text, body).into_response()
    }
}

async fn api_root(State(ctx): State<Arc<Ctx>>, headers: HeaderMap, uri: http::Uri) -> Response {
    discovery::negotiated(
        discovery::api(&ctx, &headers, &ctx.address),
        &headers,
        uri.query(),
    )
    .await
}

async fn apis_root(State(ctx): State<Arc<Ctx>>, headers: HeaderMap, uri: http::Uri) -> Response {
    discovery::negotiated(discovery::apis(&ctx, &headers), &headers, uri.query()).await
}

/// Largest request header block accepted: Go's `http.DefaultMaxHeaderBytes` (1 MiB), which
/// kube-apiserver keeps; above it HTTP/1.1 requests get 431.
const MAX_HEADER_BYTES: usize = 1 << 20;

/// Upstream's default `--max-requests-inflight`; with the mutating one, the server's seats.
pub const MAX_READONLY_INFLIGHT: usize = 400;
/// Upstream's default `--max-mutating-requests-inflight`; summed with the read-only one
/// (API Priority and Fairness, upstream's default, keeps no separate mutating limit).
pub const MAX_MUTATING_INFLIGHT: usize = 200;

/// OpenAPI documents, built on the first request for one (a few hundred milliseconds, on a
/// blocking thread; concurrent first requests await the same build) and kept. Not built at
/// start-up: the documents (≈ 5 MB serialised) and the JSON trees they are built from
/// (tens of MB while building) would otherwise weigh on every server, also those no client
/// asks for OpenAPI (issue 26: idle RSS). Their content, hashes and ETags do not depend on
/// when they are built.
#[derive(Clone)]
struct LazyOpenApi {
    cell: Arc<tokio::sync::OnceCell<crate::openapi::OpenApi>>,
    registry_ctx: Arc<Ctx>,
}

impl LazyOpenApi {
    async fn get(&self) -> &crate::openapi::OpenApi {
        self.cell
            .get_or_init(|| {
                let ctx = Arc::clone(&self.registry_ctx);
                async move {
                    let built = tokio::task::spawn_blocking(move || {
                        crate::openapi::OpenApi::build(&ctx.registry)
                    })
                    .await;
                    match built {
                        Ok(api) => api,
                        Err(_) => crate::openapi::OpenApi::build(&self.registry_ctx.registry),
                    }
                }
            })
            .await
    }
}

async fn openapi(api: LazyOpenApi, req: Request) -> Response {
    let accept = req
        .headers()
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let if_none_match = req
        .headers()
        .get(http::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    api.get().await.serve_conditional(
        req.uri().path(),
        req.uri().query(),
        accept.as_deref(),
        if_none_match.as_deref(),
    )
}

/// The router with the tier-1 pipeline: request info → audit ID → authentication → audit →
/// impersonation → metrics → flow control (seats, queue, 429) → authorization → aggregation
/// (`auditor`: `None` when auditing is off). With `dashboard`, the dashboard's static files
/// (`/dashboard/`, no data) are answered in front of the pipeline, without authentication.
#[allow(clippy::too_many_arguments)]
pub fn router(
    ctx: Arc<Ctx>,
    authorizer: Arc<dyn Authorizer>,
    authn: Arc<crate::authn::Authenticator>,
    metrics: Arc<Metrics>,
    flow_control: Arc<crate::flow_control::FlowControl>,
    auditor: Option<Arc<crate::audit::Auditor>>,
    aggregator: Arc<crate::aggregator::Aggregator>,
    dashboard: bool,
) -> Router {
    let exposition = Arc::clone(&metrics);
    let (oidc, jwks) = (authn.openid_configuration(), authn.jwks());
    let lazy = LazyOpenApi {
        cell: Arc::new(tokio::sync::OnceCell::new()),
        registry_ctx: Arc::clone(&ctx),
    };
    let resources = Router::new()
        .route(
            "/openapi/v2",
            get({
                let api = lazy.clone();
                move |req: Request| openapi(api.clone(), req)
            }),
        )
        .route(
            "/openapi/{*path}",
            get(move |req: Request| openapi(lazy.clone(), req)),
        )
        .route(
            "/metrics",
            get(move || {
                let m = Arc::clone(&exposition);
                async move {
                    (
                        [(
                            http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        m.render(),
                    )
                }
            }),
        )
        .route(
            "/.well-known/openid-configuration",
            get(move || std::future::ready(axum::Json(oidc.clone()))),
        )
        .route(
            "/openid/v1/jwks",
            get(move || {
                let body = jwks.to_string();
                std::future::ready(
                    (
                        [(http::header::CONTENT_TYPE, "application/jwk-set+json")],
                        body,
                    )
                        .into_response(),
                )
            }),
        )
        .route("/api", get(api_root))
        .route("/apis", get(apis_root))
        .route("/version", get(version))
        .route("/healthz", get(health))
        .route("/livez", get(health))
        .route("/readyz", get(health))
        .route("/healthz/{*check}", get(health))
        .route("/livez/{*check}", get(health))
        .route("/readyz/{*check}", get(health))
        .fallback(handlers::dispatch)
        .with_state(ctx);
    let impersonation = Arc::clone(&authorizer);
    // The stages wrap the whole router, in the order they run (ServiceBuilder: the first
    // layer is the outermost). Wrapping the router rather than each route (`Router::layer`)
    // means each stage's per-request clone of what it wraps is the router (reference
    // counted), not a boxed route.
    let pipeline = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn(pipeline::request_info))
        .layer(axum::middleware::from_fn({
            let auditor = auditor.clone();
            move |req, next| crate::audit::init(auditor.clone(), req, next)
        }))
        .layer(axum::middleware::from_fn(move |req, next| {
            pipeline::authenticate(Arc::clone(&authn), req, next)
        }))
        .layer(axum::middleware::from_fn(move |req, next| {
            crate::audit::record(auditor.clone(), req, next)
        }))
        .layer(axum::middleware::from_fn(move |req, next| {
            pipeline::impersonate(Arc::clone(&impersonation), req, next)
        }))
        .layer(axum::middleware::from_fn(move |req, next| {
            crate::metrics::layer(Arc::clone(&metrics), req, next)
        }))
        .layer(axum::middleware::from_fn(move |req, next| {
            crate::flow_control::layer(Arc::clone(&flow_control), req, next)
        }))
        .layer(axum::middleware::from_fn(move |req, next| {
            pipeline::authorize(Arc::clone(&authorizer), req, next)
        }))
        .layer(axum::middleware::from_fn(move |req, next| {
            crate::aggregator::layer(Arc::clone(&aggregator), req, next)
        }))
        .service(resources);
    let front = if dashboard {
        crate::dashboard::routes()
    } else {
        Router::new()
    };
    front.fallback_service(pipeline)
}

/// A task stopped when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves until `shutdown` completes.
pub async fn serve(
    cfg: &ApiServerConfig,
    ctx: Arc<Ctx>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), Error> {
    let (tls, client_ca) = tls_config(cfg)?;
    let tls = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let addr = SocketAddr::new(cfg.bind_address, cfg.secure_port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    tracing::info!(%addr, "serving the Kubernetes API over HTTPS");
    let metrics = Arc::new(Metrics::with_memory(Arc::clone(&ctx)));
    let flow_control = Arc::new(crate::flow_control::FlowControl::new(
        MAX_READONLY_INFLIGHT + MAX_MUTATING_INFLIGHT,
        crate::flow_control::MAX_QUEUED,
        crate::flow_control::WAIT_LIMIT,
        &metrics,
    ));
    let authorizer = Arc::new(
        crate::authz::Authz::from_config(ctx.storage.clone(), &cfg.authz).map_err(Error::Authz)?,
    );
    let mut authn = crate::authn::Authenticator::new(&cfg.authn, Some(ctx.storage.clone()))
        .map_err(Error::Authn)?;
    if let Some(rh) = crate::authn::requestheader::RequestHeader::from_config(&cfg.aggregator)
        .map_err(Error::Authn)?
    {
        authn.set_request_header(rh);
    }
    let request_header = authn.request_header();
    let auditor = crate::audit::Auditor::from_config(&cfg.audit).map_err(Error::Audit)?;
    let aggregator =
        crate::aggregator::Aggregator::new(Arc::clone(&ctx), &cfg.aggregator, &cfg.client_ca_file)
            .map_err(Error::Aggregator)?;
    let availability = AbortOnDrop(tokio::spawn(Arc::clone(&aggregator).run()));
    let app = router(
        ctx,
        authorizer as Arc<dyn Authorizer>,
        Arc::new(authn),
        metrics,
        flow_control,
        auditor,
        aggregator,
        cfg.dashboard,
    );
    let _availability = availability;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(err = %e, "accept failed");
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let tls = tls.clone();
        let client_ca = Arc::clone(&client_ca);
        let request_header = request_header.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let stream = match tls.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, err = %e, "TLS handshake failed");
                    return;
                }
            };
            let (identity, invalid) =
                match peer_identity(client_ca.as_ref(), stream.get_ref().1.peer_certificates()) {
                    Ok(user) => (PeerIdentity(user), None),
                    Err(why) => {
                        tracing::debug!(%peer, %why, "client certificate refused");
                        (PeerIdentity(None), Some(pipeline::InvalidClientCert(why)))
                    }
                };
            let front_proxy = request_header
                .as_ref()
                .is_some_and(|rh| rh.verify(stream.get_ref().1.peer_certificates()));
            let svc = app.map_request(move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(identity.clone());
                if front_proxy {
                    req.extensions_mut()
                        .insert(crate::authn::requestheader::FrontProxy);
                }
                if let Some(invalid) = &invalid {
                    req.extensions_mut().insert(invalid.clone());
                }
                req.extensions_mut().insert(crate::audit::RemoteAddr(peer));
                req.map(axum::body::Body::new)
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            // Go's (and so kube-apiserver's) header limit, so large bearer tokens reach the
            // authenticators (and get their 401) instead of a protocol error.
            builder.http1().max_buf_size(MAX_HEADER_BYTES + 64 * 1024);
            builder
                .http2()
                .max_header_list_size(MAX_HEADER_BYTES as u32);
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(svc))
                .await
            {
                tracing::debug!(%peer, err = %e, "connection ended with an error");
            }
        });
    }
}
