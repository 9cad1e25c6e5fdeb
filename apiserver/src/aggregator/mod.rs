//! API aggregation (kube-aggregator's behaviour, in-process): APIServices whose
//! `spec.service` is set are served by extension API servers, to which requests under
//! `/apis/<group>/<version>` are proxied after this server's authentication and
//! authorization, with the user in request headers and the front-proxy client certificate
//! as proof (`proxy.rs`, `client.rs`); the rest are `Local`.
//!
//! - `registration.rs`: `Local` APIServices of every served built-in and custom group
//!   version, and `kube-system/extension-apiserver-authentication`;
//! - `available.rs`: the `Available` conditions, checked every [`ROUND`];
//! - `discovery.rs`: `/apis` (aggregated and legacy) and `/apis/<group>` merged with the
//!   extension servers';
//! - `openapi.rs`: `/openapi/v2` and `/openapi/v3` merged with the extension servers';
//! - `table.rs`: the stored APIServices as the request path reads them;
//! - `endpoints.rs`: a Service's ready endpoint through its EndpointSlices (no kube-proxy).
//!
//! A request for an unavailable APIService gets upstream's `503 service unavailable`.

pub mod available;
pub mod client;
pub mod discovery;
pub mod openapi;
pub mod proxy;
pub mod registration;
pub mod table;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};
use serde_json::{Map, Value};

use crate::handlers::Ctx;
use crate::pipeline::UserInfo;

/// How often availability is checked and the local APIServices reconciled.
pub const ROUND: Duration = Duration::from_secs(2);

/// The aggregation flags (kube-apiserver's names).
#[derive(Debug, Clone)]
pub struct AggregatorConfig {
    /// `--proxy-client-cert-file`: the client certificate presented to extension servers.
    pub proxy_client_cert_file: Option<PathBuf>,
    /// `--proxy-client-key-file`.
    pub proxy_client_key_file: Option<PathBuf>,
    /// `--requestheader-client-ca-file`: the CA extension servers must trust for the
    /// request headers (published in `extension-apiserver-authentication`).
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// `--requestheader-allowed-names`.
    pub requestheader_allowed_names: Vec<String>,
    /// `--requestheader-username-headers`.
    pub requestheader_username_headers: Vec<String>,
    /// `--requestheader-group-headers`.
    pub requestheader_group_headers: Vec<String>,
    /// `--requestheader-extra-headers-prefix`.
    pub requestheader_extra_headers_prefix: Vec<String>,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        AggregatorConfig {
            proxy_client_cert_file: None,
            proxy_client_key_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: vec!["X-Remote-User".into()],
            requestheader_group_headers: vec!["X-Remote-Group".into()],
            requestheader_extra_headers_prefix: vec!["X-Remote-Extra-".into()],
        }
    }
}

/// The aggregator's state: the APIService table, the proxy client, the extension servers'
/// discovery entries.
pub struct Aggregator {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) table: table::Table,
    pub(crate) client: client::Client,
    discovery: RwLock<Arc<HashMap<String, Value>>>,
    pub(crate) openapi: openapi::Specs,
    authentication: Map<String, Value>,
}

impl Aggregator {
    /// Loads the proxy identity and CAs named by `cfg`; `client_ca_file` is the cluster's
    /// client CA (`--client-ca-file`).
    pub fn new(
        ctx: Arc<Ctx>,
        cfg: &AggregatorConfig,
        client_ca_file: &std::path::Path,
    ) -> Result<Arc<Self>, String> {
        let identity = match (&cfg.proxy_client_cert_file, &cfg.proxy_client_key_file) {
            (Some(c), Some(k)) => Some(client::ProxyIdentity::load(c, k)?),
            (None, None) => None,
            _ => {
                return Err(
                    "--proxy-client-cert-file and --proxy-client-key-file go together".into(),
                );
            }
        };
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))
        };
        let client_ca = read(client_ca_file)?;
        let requestheader_ca = cfg
            .requestheader_client_ca_file
            .as_deref()
            .map(read)
            .transpose()?;
        Ok(Arc::new(Aggregator {
            ctx,
            table: table::Table::default(),
            client: client::Client::new(identity),
            discovery: RwLock::default(),
            openapi: openapi::Specs::default(),
            authentication: registration::authentication_data(
                cfg,
                &client_ca,
                requestheader_ca.as_deref(),
            ),
        }))
    }

    fn entries(&self) -> Arc<HashMap<String, Value>> {
        Arc::clone(
            &self
                .discovery
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Runs registration and availability rounds forever.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(ROUND);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = registration::sync_local(&self.ctx).await {
                tracing::warn!(err = %e, "registering local APIServices");
            }
            if let Err(e) =
                registration::sync_authentication_configmap(&self.ctx.storage, &self.authentication)
                    .await
            {
                tracing::warn!(err = %e, "writing extension-apiserver-authentication");
            }
            let entries = available::round(&self).await;
            *self
                .discovery
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(entries);
        }
    }
}

/// The tier-1 stage after authorization: discovery roots with extension groups, and
/// requests for service-backed APIServices proxied; everything else goes on.
pub async fn layer(agg: Arc<Aggregator>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if openapi::is_openapi_path(path) && req.method() == Method::GET {
        return openapi::serve(agg, req, next).await;
    }
    let Some(rest) = path.strip_prefix("/apis") else {
        return next.run(req).await;
    };
    let is_get = req.method() == Method::GET || req.method() == Method::HEAD;
    if rest.is_empty() || rest == "/" {
        if !is_get {
            return next.run(req).await;
        }
        let snapshot = agg.table.snapshot(&agg.ctx.storage);
        if snapshot.remote().next().is_none() {
            return next.run(req).await;
        }
        let (headers, query) = (req.headers(), req.uri().query());
        return discovery::apis(&agg.ctx, &snapshot, &agg.entries(), headers, query).await;
    }
    let Some(rest) = rest.strip_prefix('/') else {
        return next.run(req).await;
    };
    let mut parts = rest.splitn(3, '/');
    let group = parts.next().unwrap_or("");
    let version = parts.next().unwrap_or("");
    let snapshot = agg.table.snapshot(&agg.ctx.storage);
    if version.is_empty() {
        if is_get && snapshot.is_remote_group(group) {
            let Some(doc) = discovery::group_document(&snapshot, &agg.entries(), group) else {
                return crate::error::ApiError::NoRoute.into_response();
            };
            let (headers, query) = (req.headers(), req.uri().query());
            return crate::discovery::negotiated(doc, headers, query).await;
        }
        return next.run(req).await;
    }
    let Some(svc) = snapshot.get(group, version).filter(|s| s.service.is_some()) else {
        return next.run(req).await;
    };
    if !svc.available {
        return proxy::plain_error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
    }
    let ep = match available::endpoint_of(&agg, svc) {
        Ok(ep) => ep,
        Err(c) => {
            tracing::warn!(apiservice = %svc.name, reason = c.reason, message = %c.message, "cannot resolve the extension server");
            return proxy::plain_error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
        }
    };
    let Some(user) = req.extensions().get::<UserInfo>().cloned() else {
        return proxy::plain_error(StatusCode::INTERNAL_SERVER_ERROR, "missing user");
    };
    proxy::forward(&agg.client, &ep, &user, req).await
}
