//! The server's concurrency limit as kube-apiserver applies it with API Priority and
//! Fairness on (its default): `--max-requests-inflight` + `--max-mutating-requests-inflight`
//! seats shared by every request that is not long-running (watches; log, exec, attach,
//! port-forward and proxy streams), a bounded FIFO queue
//! for the requests that find no free seat — so a brief burst waits instead of failing —
//! and 429 TooManyRequests (`Retry-After: 1`) only when the queue is full or a request has
//! waited [`WAIT_LIMIT`]. Members of `system:masters` are exempt, as upstream's `exempt`
//! priority level. One priority level, no per-flow fairness: FlowSchema objects are stored but
//! not consulted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::metrics::{KindLabel, Metrics};
use crate::pipeline::UserInfo;
use crate::request_info::RequestInfo;

/// Longest a request waits for a seat: a quarter of the default `--request-timeout` (60 s),
/// upstream's request wait limit.
pub const WAIT_LIMIT: Duration = Duration::from_secs(15);

/// Most requests waiting at once: upstream's `global-default` priority level's queues (128)
/// times its queue length limit (50).
pub const MAX_QUEUED: usize = 128 * 50;

/// The seats and their queue.
pub struct FlowControl {
    seats: Arc<Semaphore>,
    queued: AtomicUsize,
    max_queued: usize,
    wait_limit: Duration,
    /// In-flight gauges: [read-only, mutating].
    inflight: [Gauge; 2],
    /// In-queue gauges: [read-only, mutating].
    inqueue: [Gauge; 2],
}

/// The gauges of `family` for read-only and mutating requests, in that order.
fn by_kind(family: &Family<KindLabel, Gauge>) -> [Gauge; 2] {
    ["readOnly", "mutating"].map(|k| {
        family
            .get_or_create(&KindLabel {
                request_kind: k.into(),
            })
            .clone()
    })
}

impl FlowControl {
    /// `seats` requests served at once (upstream: the sum of the two in-flight flags), the
    /// gauges registered in `metrics`.
    pub fn new(seats: usize, max_queued: usize, wait_limit: Duration, metrics: &Metrics) -> Self {
        FlowControl {
            seats: Arc::new(Semaphore::new(seats)),
            queued: AtomicUsize::new(0),
            max_queued,
            wait_limit,
            inflight: by_kind(&metrics.inflight),
            inqueue: by_kind(&metrics.inqueue),
        }
    }
}

/// Decrements a gauge when dropped (a cancelled request leaves the counts right).
struct Held(Gauge);

impl Held {
    fn new(g: Gauge) -> Self {
        g.inc();
        Held(g)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Counts a waiting request while alive.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Upstream's `BasicLongRunningRequestCheck` as kube-apiserver configures it: the verbs
/// `watch` and `proxy`, and the subresources `attach`, `exec`, `proxy`, `log` and
/// `portforward` hold no seat (a stream may last for hours).
fn is_long_running(info: &RequestInfo) -> bool {
    matches!(info.verb.as_str(), "watch" | "proxy")
        || (info.is_resource
            && matches!(
                info.subresource.as_str(),
                "attach" | "exec" | "proxy" | "log" | "portforward"
            ))
}

/// Middleware: serves the request in a seat, waiting in the queue for one if need be.
pub async fn layer(fc: Arc<FlowControl>, req: Request, next: Next) -> Response {
    let (long_running, mutating) =
        req.extensions()
            .get::<RequestInfo>()
            .map_or((false, false), |info| {
                (
                    is_long_running(info),
                    matches!(
                        info.verb.as_str(),
                        "create" | "update" | "patch" | "delete" | "deletecollection"
                    ),
                )
            });
    let exempt = req
        .extensions()
        .get::<UserInfo>()
        .is_some_and(|u| u.groups.iter().any(|g| g == "system:masters"));
    if long_running || exempt {
        return next.run(req).await;
    }
    let kind = usize::from(mutating);
    let permit = match Arc::clone(&fc.seats).try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            if fc.queued.fetch_add(1, Ordering::AcqRel) >= fc.max_queued {
                fc.queued.fetch_sub(1, Ordering::AcqRel);
                return ApiError::TooManyRequests.into_response();
            }
            let _waiting = Waiting(&fc.queued);
            let _queued = Held::new(fc.inqueue[kind].clone());
            match tokio::time::timeout(fc.wait_limit, Arc::clone(&fc.seats).acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => return ApiError::TooManyRequests.into_response(),
            }
        }
    };
    let _inflight = Held::new(fc.inflight[kind].clone());
    let resp = next.run(req).await;
    drop(permit);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::get;
    use tower::ServiceExt;

    /// A router whose handler holds its request until `release` has a permit.
    fn app(fc: Arc<FlowControl>, release: Arc<Semaphore>) -> Router {
        Router::new()
            .route(
                "/api/v1/namespaces/default/pods",
                get(move || {
                    let release = Arc::clone(&release);
                    async move {
                        let _ = release.acquire().await;
                        "ok"
                    }
                }),
            )
            .layer(axum::middleware::from_fn(move |req, next| {
                layer(Arc::clone(&fc), req, next)
            }))
            .layer(axum::middleware::from_fn(
                |mut req: Request, next: Next| async move {
                    let info = RequestInfo::parse(req.method(), req.uri().path(), None);
                    req.extensions_mut().insert(info);
                    next.run(req).await
                },
            ))
    }

    /// A limiter with `seats` and `max_queued` in front of [`app`], whose handlers wait
    /// for permits of the returned semaphore.
    fn setup(
        seats: usize,
        max_queued: usize,
        wait_limit: Duration,
    ) -> (Metrics, Arc<FlowControl>, Arc<Semaphore>, Router) {
        let metrics = Metrics::new();
        let fc = Arc::new(FlowControl::new(seats, max_queued, wait_limit, &metrics));
        let release = Arc::new(Semaphore::new(0));
        let app = app(Arc::clone(&fc), Arc::clone(&release));
        (metrics, fc, release, app)
    }

    #[test]
    fn streams_are_long_running_as_upstream() {
        use http::Method;
        let info = |m: Method, p: &str| RequestInfo::parse(&m, p, None);
        for p in ["log", "exec", "attach", "portforward", "proxy"] {
            let path = format!("/api/v1/namespaces/default/pods/web/{p}");
            assert!(is_long_running(&info(Method::GET, &path)), "{p}");
            assert!(is_long_running(&info(Method::POST, &path)), "{p}");
        }
        assert!(!is_long_running(&info(
            Method::GET,
            "/api/v1/namespaces/default/pods/web/status"
        )));
        assert!(!is_long_running(&info(
            Method::GET,
            "/api/v1/namespaces/default/pods"
        )));
    }

    /// Yields until `done` holds.
    async fn until(done: impl Fn() -> bool) {
        while !done() {
            tokio::task::yield_now().await;
        }
    }

    /// Sends one request.
    async fn call(app: &Router) -> http::Response<axum::body::Body> {
        app.clone()
            .oneshot(get_pods())
            .await
            .unwrap_or_else(|e| match e {})
    }

    /// The status of a spawned [`call`].
    async fn status(
        h: tokio::task::JoinHandle<http::Response<axum::body::Body>>,
    ) -> http::StatusCode {
        h.await
            .map(|r| r.status())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn get_pods() -> Request {
        Request::builder()
            .uri("/api/v1/namespaces/default/pods")
            .body(axum::body::Body::empty())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_burst_past_the_seats_waits_instead_of_failing() {
        let (metrics, fc, release, app) = setup(2, 10, Duration::from_secs(60));
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { call(&app).await })
            })
            .collect();
        // Two are served, three wait.
        until(|| fc.queued.load(Ordering::Acquire) == 3).await;
        assert!(
            metrics
                .render()
                .contains("apiserver_current_inqueue_requests{request_kind=\"readOnly\"} 3")
        );
        release.add_permits(5);
        for c in calls {
            assert_eq!(status(c).await, http::StatusCode::OK);
        }
        assert_eq!(fc.queued.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_full_queue_answers_429_with_retry_after() {
        let (_metrics, fc, release, app) = setup(1, 1, Duration::from_secs(60));
        let a = app.clone();
        let served = tokio::spawn(async move { call(&a).await });
        until(|| fc.seats.available_permits() == 0).await;
        let a = app.clone();
        let queued = tokio::spawn(async move { call(&a).await });
        until(|| fc.queued.load(Ordering::Acquire) == 1).await;
        let resp = call(&app).await;
        assert_eq!(resp.status(), http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            resp.headers()
                .get(http::header::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        release.add_permits(2);
        assert_eq!(status(served).await, http::StatusCode::OK);
        assert_eq!(status(queued).await, http::StatusCode::OK);
    }

    #[tokio::test]
    async fn a_request_waits_at_most_the_wait_limit() {
        // The seat is never released: the second request can only end by its wait limit.
        let (_metrics, fc, _release, app) = setup(1, 10, Duration::from_millis(50));
        let a = app.clone();
        let _served = tokio::spawn(async move { call(&a).await });
        until(|| fc.seats.available_permits() == 0).await;
        assert_eq!(
            call(&app).await.status(),
            http::StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(fc.queued.load(Ordering::Acquire), 0);
    }
}
