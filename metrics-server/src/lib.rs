//! `capstan metrics-server`: the resource metrics API `metrics.k8s.io/v1beta1` (NodeMetrics,
//! PodMetrics) served as metrics-server serves it — an extension API server of its own
//! behind the API server's aggregation layer, so `kubectl top` and the HPA controller go
//! through the aggregator for real.
//!
//! - `register.rs`: on start, the Service `kube-system/metrics-server` (selector-less), its
//!   EndpointSlice pointing at this server's address and port, and the APIService
//!   `v1beta1.metrics.k8s.io` (`insecureSkipTLSVerify`, as metrics-server's manifest) are
//!   applied through the API (server-side apply);
//! - `auth.rs`: delegated authentication as an extension server does it: the request-header
//!   CA and allowed names read from `kube-system/extension-apiserver-authentication`; a
//!   request is served only with a client certificate from that CA and `X-Remote-User`;
//! - `authz.rs`: delegated authorization: each request's user is put to the API server as a
//!   SubjectAccessReview (cached 10 s; `system:masters` and health paths always allowed);
//! - `api.rs`: the endpoints (get and list, label and field selectors), reading nodes and
//!   pods through the API on each request;
//! - `usage.rs`: the simulated usage model and its per-pod annotations;
//! - `measured.rs`: measured usage of pods on process nodes, scraped from their kubelets'
//!   `/metrics/resource` through `nodes/proxy` (CPU as a rate between two scrapes).

mod api;
mod auth;
mod authz;
mod measured;
mod register;
pub mod usage;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

/// Flags of `capstan metrics-server`.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Address to serve HTTPS on (also the address registered in the EndpointSlice).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// Port to serve on (0: any free port; the EndpointSlice names the one bound).
    #[arg(long, default_value_t = 0)]
    pub secure_port: u16,
    /// Serving certificate (PEM); without it and `--tls-private-key-file` a self-signed one
    /// is generated (the APIService skips TLS verification, as metrics-server's manifest).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// The metrics window reported (metrics-server's `--metric-resolution`), in seconds.
    #[arg(long, default_value_t = 15)]
    pub metric_resolution_seconds: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bind_address: IpAddr::from([127, 0, 0, 1]),
            secure_port: 0,
            tls_cert_file: None,
            tls_private_key_file: None,
            metric_resolution_seconds: 15,
        }
    }
}

/// The serving certificate chain and key.
fn serving_identity(
    options: &Options,
) -> anyhow::Result<(
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
)> {
    use rustls::pki_types::pem::PemObject as _;
    match (&options.tls_cert_file, &options.tls_private_key_file) {
        (Some(cert), Some(key)) => {
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(cert)
                .with_context(|| format!("reading {}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("reading {}", cert.display()))?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("reading {}", key.display()))?;
            Ok((certs, key))
        }
        (None, None) => {
            let cert = rcgen::generate_simple_self_signed(vec![
                "metrics-server.kube-system.svc".to_owned(),
                options.bind_address.to_string(),
            ])?;
            let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der())
                .map_err(|e| anyhow::anyhow!("self-signed key: {e}"))?;
            Ok((vec![cert.cert.der().clone()], key))
        }
        _ => anyhow::bail!("--tls-cert-file and --tls-private-key-file go together"),
    }
}

/// Serves the metrics API until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    options: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let trust = auth::RequestHeaderTrust::load(&client).await?;
    let (certs, key) = serving_identity(&options)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(trust.roots.clone()),
        Arc::clone(&provider),
    )
    .allow_unauthenticated()
    .build()?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::new(options.bind_address, options.secure_port))
            .await
            .context("binding the metrics server")?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving metrics.k8s.io/v1beta1");
    // Registration is retried: the API server may still be starting its bootstrap.
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        match register::apply(&client, addr).await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "registering the metrics API; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
            }
        }
    }
    let state = Arc::new(api::State {
        authz: authz::Authorizer::new(client.clone()),
        client,
        window_seconds: options.metric_resolution_seconds,
        trust,
        scraper: measured::Scraper::default(),
    });
    loop {
        let (tcp, peer) = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(err = %e, "accept failed");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(%peer, err = %e, "TLS handshake failed");
                    return;
                }
            };
            let proxy = state
                .trust
                .proxy_allowed(tls.get_ref().1.peer_certificates());
            let service = hyper::service::service_fn(move |req| {
                let state = Arc::clone(&state);
                async move { Ok::<_, std::convert::Infallible>(api::serve(&state, proxy, req).await) }
            });
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
        });
    }
}
