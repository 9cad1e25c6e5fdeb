//! API clients over HTTP/2, as client-go's: kube-rs's request stack (base URI, credentials,
//! server-error retries) over a transport that multiplexes every request and watch of a
//! client on ONE connection. kube-rs's own connector speaks HTTP/1.1 only, so each open
//! watch held its own TLS connection: a fresh `capstan server` kept 128 of them to itself
//! (both ends' TLS state and read buffers in its idle heap; issue 26). The in-process
//! components' clients (`capstan`'s `client_from_kubeconfig`) and the controllers'
//! per-service-account clients (`credentials`, which share one transport) are built here.

use std::time::Duration;

use anyhow::Context as _;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

/// How often an idle connection is pinged, and how long a ping may go unanswered before the
/// connection counts as dead (in place of kube-rs's per-read timeout, which would end
/// long-lived watch streams).
const KEEP_ALIVE: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// An HTTP/2 connection pool to one API server (cheap to clone: clones share it).
pub type Transport = HyperClient<HttpsConnector<HttpConnector>, kube::client::Body>;

/// The transport for `config`'s server: TLS with `config`'s CA and client certificate (if
/// any), ALPN `h2`; cleartext HTTP/2 (prior knowledge) for an `http://` server.
pub fn transport(config: &kube::Config) -> anyhow::Result<Transport> {
    let tls = config
        .rustls_client_config()
        .context("building the TLS client configuration")?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http2()
        .wrap_connector(http);
    Ok(HyperClient::builder(TokioExecutor::new())
        .http2_only(true)
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEP_ALIVE)
        .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(https))
}

/// A client sending `config`'s credentials (bearer token, token file, …; a client
/// certificate is the transport's) over `transport`.
pub fn client_over(transport: Transport, config: &kube::Config) -> anyhow::Result<kube::Client> {
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().context("client credentials")?)
        .layer(config.extra_headers_layer().context("extra headers")?)
        .map_err(tower::BoxError::from)
        .service(transport);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// Sets the User-Agent client-go's components send (`rest.DefaultKubernetesUserAgent`:
/// `<program>/v1.33.0 (linux/amd64) kubernetes/<commit>`, plus `/<suffix>` as
/// `rest.AddUserAgent` adds a controller's name). The API server names a writer's
/// managedFields entry after the part before the first `/`, so the in-process components'
/// writes are recorded as upstream's are (`kube-controller-manager`, `kube-scheduler`,
/// `kubelet`) instead of `unknown`, and audit records carry the same agent.
pub fn set_user_agent(config: &mut kube::Config, program: &str, suffix: Option<&str>) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let mut agent = format!(
        "{program}/v1.33.0 ({}/{arch}) kubernetes/capstan",
        std::env::consts::OS
    );
    if let Some(suffix) = suffix {
        agent.push('/');
        agent.push_str(suffix);
    }
    if let Ok(value) = http::HeaderValue::from_str(&agent) {
        config
            .headers
            .retain(|(name, _)| name != http::header::USER_AGENT);
        config.headers.push((http::header::USER_AGENT, value));
    }
}

/// A client for `config` on a transport of its own.
pub fn http2_client(config: &kube::Config) -> anyhow::Result<kube::Client> {
    client_over(transport(config)?, config)
}
