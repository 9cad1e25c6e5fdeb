//! The fleet's one HTTP client, and how each node's own requests go through it.
//!
//! Every simulated node acts as `system:node:<name>` (group `system:nodes`), as a kubelet
//! does with its own client certificate. Rather than one client (and connection pool) per
//! node, the fleet keeps ONE `kube::Client` and adds `Impersonate-User` /
//! `Impersonate-Group` headers to each node's request (the apiserver authorizes the fleet's
//! user for `impersonate`, then judges the request as the node). A semaphore bounds the
//! requests in flight, so 5,000 nodes starting at once queue here instead of opening
//! thousands of connections or tripping the apiserver's in-flight limit; 429 and 5xx
//! answers and transport errors are retried with a short backoff.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, Request};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Semaphore;

/// Heartbeat requests in flight at once (see [`Lane`]).
const MAX_IN_FLIGHT: usize = 24;
/// Work requests (pod status above all) in flight at once: the fleet stands for many
/// kubelets, each with its own connection, so pod status gets the widest lane.
const MAX_WORK_IN_FLIGHT: usize = 64;
/// Events in flight at once: they are best effort and must not crowd out pod status.
const MAX_EVENTS_IN_FLIGHT: usize = 8;

/// Which queue a request waits in: heartbeats (Lease renewals, status reports), events, and
/// the rest (registration, pod status, deletions) each have their own share of the
/// connections, so 5,000 nodes' renewals never starve pods or registration, nor the reverse,
/// and a burst of events waits behind no pod status (a kubelet's event recorder has its own
/// queue and rate limit, apart from its status manager).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Lease renewals and periodic Node status reports.
    Heartbeat,
    /// Events about pods and nodes.
    Events,
    /// Everything else.
    Work,
}
/// Attempts for a request answered 429/5xx or lost in transport.
const ATTEMPTS: u32 = 5;

/// Content type of a strategic merge patch.
pub(crate) const STRATEGIC: &str = "application/strategic-merge-patch+json";
/// Content type of a JSON merge patch.
pub(crate) const MERGE: &str = "application/merge-patch+json";
/// Content type of a JSON body.
pub(crate) const JSON: &str = "application/json";

/// The shared client plus the impersonation policy.
#[derive(Clone)]
pub(crate) struct FleetApi {
    client: kube::Client,
    impersonate: bool,
    heartbeats: Arc<Semaphore>,
    events: Arc<Semaphore>,
    work: Arc<Semaphore>,
}

/// One request, kept as parts so it can be sent again.
pub(crate) struct Call {
    method: Method,
    path: String,
    body: Option<(Vec<u8>, &'static str)>,
}

impl Call {
    /// `GET path`.
    pub(crate) fn get(path: impl Into<String>) -> Self {
        Call {
            method: Method::GET,
            path: path.into(),
            body: None,
        }
    }

    /// `POST path` with a JSON body.
    pub(crate) fn post(path: impl Into<String>, body: &Value) -> Self {
        Self::with_body(Method::POST, path, body, JSON)
    }

    /// `PUT path` with a JSON body.
    pub(crate) fn put(path: impl Into<String>, body: &Value) -> Self {
        Self::with_body(Method::PUT, path, body, JSON)
    }

    /// `PATCH path` with a body of `content_type`.
    pub(crate) fn patch(path: impl Into<String>, body: &Value, content_type: &'static str) -> Self {
        Self::with_body(Method::PATCH, path, body, content_type)
    }

    /// `DELETE path` with a `DeleteOptions` body.
    pub(crate) fn delete(path: impl Into<String>, options: &Value) -> Self {
        Self::with_body(Method::DELETE, path, options, JSON)
    }

    fn with_body(
        method: Method,
        path: impl Into<String>,
        body: &Value,
        content_type: &'static str,
    ) -> Self {
        Call {
            method,
            path: path.into(),
            body: Some((body.to_string().into_bytes(), content_type)),
        }
    }

    fn build(
        &self,
        node: Option<&str>,
        impersonate: bool,
    ) -> Result<Request<Vec<u8>>, http::Error> {
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(&self.path)
            .header(http::header::ACCEPT, JSON);
        if let Some((_, ct)) = &self.body {
            b = b.header(http::header::CONTENT_TYPE, *ct);
        }
        if let (Some(node), true) = (node, impersonate) {
            let user = HeaderValue::try_from(format!("system:node:{node}"))?;
            b = b
                .header("Impersonate-User", user)
                .header("Impersonate-Group", "system:nodes");
        }
        b.body(
            self.body
                .as_ref()
                .map(|(b, _)| b.clone())
                .unwrap_or_default(),
        )
    }
}

impl FleetApi {
    /// Wraps the fleet's client; with `impersonate` false every request goes as the fleet's
    /// own user (for clusters that do not let it impersonate nodes).
    pub(crate) fn new(client: kube::Client, impersonate: bool) -> Self {
        FleetApi {
            client,
            impersonate,
            heartbeats: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            events: Arc::new(Semaphore::new(MAX_EVENTS_IN_FLIGHT)),
            work: Arc::new(Semaphore::new(MAX_WORK_IN_FLIGHT)),
        }
    }

    /// The shared client, for the fleet's own reads (the pod watch, the node list).
    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Sends `call` as node `node` (or as the fleet itself when `node` is `None`) in the
    /// work lane and decodes the answer; retries 429, 5xx and transport errors.
    pub(crate) async fn send<T: DeserializeOwned>(
        &self,
        node: Option<&str>,
        call: &Call,
    ) -> kube::Result<T> {
        self.send_in(Lane::Work, node, call).await
    }

    /// As [`FleetApi::send`], in `lane`.
    pub(crate) async fn send_in<T: DeserializeOwned>(
        &self,
        lane: Lane,
        node: Option<&str>,
        call: &Call,
    ) -> kube::Result<T> {
        let permits = match lane {
            Lane::Heartbeat => &self.heartbeats,
            Lane::Events => &self.events,
            Lane::Work => &self.work,
        };
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            let request = call
                .build(node, self.impersonate)
                .map_err(kube::Error::HttpError)?;
            let result = {
                let _permit = permits.acquire().await;
                self.client.request::<T>(request).await
            };
            match result {
                Err(e) if attempt < ATTEMPTS && retryable(&e) => {
                    tracing::debug!(path = %call.path, error = %e, attempt, "retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(3));
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// Whether an error is worth retrying at once (overload, server errors, transport).
fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The HTTP status code of an API error, if it is one.
pub(crate) fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}
