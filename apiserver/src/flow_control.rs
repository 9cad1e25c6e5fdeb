//! The server's concurrency limit as kube-apiserver applies it with API Priority and
//! Fairness on (its default): `--max-requests-inflight` + `--max-mutating-requests-inflight`
//! seats shared by every request that is not long-running (watches), a bounded FIFO queue
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
    inflight: Family<KindLabel, Gauge>,
    inqueue: Family<KindLabel, Gauge>,
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
            inflight: metrics.inflight.clone(),
            inqueue: metrics.inqueue.clone(),
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

/// Middleware: serves the request in a seat, waiting in the queue for one if need be.
pub async fn layer(fc: Arc<FlowControl>, req: Request, next: Next) -> Response {
    let (long_running, mutating) =
        req.extensions()
            .get::<RequestInfo>()
            .map_or((false, false), |info| {
                (
                    info.verb == "watch",
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
    let kind = KindLabel {
        request_kind: if mutating { "mutating" } else { "readOnly" }.into(),
    };
    let permit = match Arc::clone(&fc.seats).try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            if fc.queued.fetch_add(1, Ordering::AcqRel) >= fc.max_queued {
                fc.queued.fetch_sub(1, Ordering::AcqRel);
                return ApiError::TooManyRequests.into_response();
            }
            let _waiting = Waiting(&fc.queued);
            let _queued = Held::new(fc.inqueue.get_or_create(&kind).clone());
            match tokio::time::timeout(fc.wait_limit, Arc::clone(&fc.seats).acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => return ApiError::TooManyRequests.into_response(),
            }
        }
    };
    let _inflight = Held::new(fc.inflight.get_or_create(&kind).clone());
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

    fn get_pods() -> Request {
        Request::builder()
            .uri("/api/v1/namespaces/default/pods")
            .body(axum::body::Body::empty())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_burst_past_the_seats_waits_instead_of_failing() {
        let metrics = Metrics::new();
        let fc = Arc::new(FlowControl::new(2, 10, Duration::from_secs(60), &metrics));
        let release = Arc::new(Semaphore::new(0));
        let app = app(Arc::clone(&fc), Arc::clone(&release));
        let calls: Vec<_> = (0..5)
            .map(|_| tokio::spawn(app.clone().oneshot(get_pods())))
            .collect();
        // Two are served, three wait.
        while fc.queued.load(Ordering::Acquire) < 3 {
            tokio::task::yield_now().await;
        }
        assert!(
            metrics
                .render()
                .contains("apiserver_current_inqueue_requests{request_kind=\"readOnly\"} 3")
        );
        release.add_permits(5);
        for c in calls {
            let resp = c
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|e| match e {});
            assert_eq!(resp.status(), http::StatusCode::OK);
        }
        assert_eq!(fc.queued.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_full_queue_answers_429_with_retry_after() {
        let metrics = Metrics::new();
        let fc = Arc::new(FlowControl::new(1, 1, Duration::from_secs(60), &metrics));
        let release = Arc::new(Semaphore::new(0));
        let app = app(Arc::clone(&fc), Arc::clone(&release));
        let served = tokio::spawn(app.clone().oneshot(get_pods()));
        while fc.seats.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let queued = tokio::spawn(app.clone().oneshot(get_pods()));
        while fc.queued.load(Ordering::Acquire) < 1 {
            tokio::task::yield_now().await;
        }
        let resp = app
            .clone()
            .oneshot(get_pods())
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(resp.status(), http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            resp.headers()
                .get(http::header::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        release.add_permits(2);
        for c in [served, queued] {
            let resp = c
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|e| match e {});
            assert_eq!(resp.status(), http::StatusCode::OK);
        }
    }

    #[tokio::test]
    async fn a_request_waits_at_most_the_wait_limit() {
        let metrics = Metrics::new();
        // The seat is never released: the second request can only end by its wait limit.
        let fc = Arc::new(FlowControl::new(1, 10, Duration::from_millis(50), &metrics));
        let release = Arc::new(Semaphore::new(0));
        let app = app(Arc::clone(&fc), Arc::clone(&release));
        let _served = tokio::spawn(app.clone().oneshot(get_pods()));
        while fc.seats.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let resp = app
            .clone()
            .oneshot(get_pods())
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(resp.status(), http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(fc.queued.load(Ordering::Acquire), 0);
    }
}
