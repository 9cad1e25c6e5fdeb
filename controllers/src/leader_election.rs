//! Leader election through a `coordination.k8s.io` Lease, as client-go's `LeaderElector` with
//! kube-controller-manager's settings: lease `kube-system/kube-controller-manager`, holder
//! identity `<hostname>_<uuid>`, lease duration 15 s, renew deadline 10 s, retry period 2 s.
//! Another holder's lease counts as expired when this process has not seen it change for a lease
//! duration (local observation time, never the other's clock).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Lease namespace and name.
const NAMESPACE: &str = "kube-system";
/// kube-controller-manager's lease name.
pub(crate) const LEASE_NAME: &str = "kube-controller-manager";
/// `--leader-elect-lease-duration`.
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// `--leader-elect-renew-deadline`.
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// `--leader-elect-retry-period`.
const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// One candidate for the lease.
pub(crate) struct Elector {
    api: Api<Lease>,
    identity: String,
    metrics: Arc<Metrics>,
    /// The last record seen (holder, renew time) and when it was seen.
    observed: Option<(String, Option<MicroTime>, Instant)>,
}

impl Elector {
    /// A candidate with identity `<hostname>_<uuid>`.
    pub(crate) fn new(client: kube::Client, metrics: Arc<Metrics>) -> Self {
        let host = crate::context::hostname().unwrap_or_else(|| "localhost".to_owned());
        Elector {
            api: Api::namespaced(client, NAMESPACE),
            identity: format!("{host}_{}", uuid::Uuid::new_v4()),
            metrics,
            observed: None,
        }
    }

    /// This candidate's holder identity.
    pub(crate) fn identity(&self) -> &str {
        &self.identity
    }

    /// Runs `lead` each time this process becomes leader, cancelling the token it is given
    /// when the lease is lost; returns when `shutdown` is cancelled.
    pub(crate) async fn run<F, Fut>(mut self, shutdown: CancellationToken, lead: F)
    where
        F: Fn(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            // Acquire.
            loop {
                match self.try_acquire_or_renew().await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "error retrieving resource lock kube-system/kube-controller-manager")
                    }
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(jitter(RETRY_PERIOD)) => {}
                }
            }
            tracing::info!(identity = %self.identity, "successfully acquired lease kube-system/kube-controller-manager");
            self.metrics.set_leader(LEASE_NAME, true);
            let leading = shutdown.child_token();
            let task = tokio::spawn(lead(leading.clone()));
            // Renew until the deadline passes without a successful renewal.
            let mut last_renew = Instant::now();
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(RETRY_PERIOD) => {}
                }
                match self.try_acquire_or_renew().await {
                    Ok(true) => last_renew = Instant::now(),
                    Ok(false) => {
                        tracing::error!("leaderelection lost: another holder took the lease");
                        break;
                    }
                    Err(e) => tracing::warn!(error = %e, "failed to renew lease"),
                }
                if last_renew.elapsed() > RENEW_DEADLINE {
                    tracing::error!("leaderelection lost: renew deadline exceeded");
                    break;
                }
            }
            leading.cancel();
            let _ = task.await;
            self.metrics.set_leader(LEASE_NAME, false);
            if shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// One attempt, as client-go's `tryAcquireOrRenew`: Ok(true) when this process holds the
    /// lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let duration = i32::try_from(LEASE_DURATION.as_secs()).unwrap_or(15);
        let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.to_owned()),
                    namespace: Some(NAMESPACE.to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now.clone()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let changed = match &self.observed {
            Some((h, r, _)) => *h != holder || *r != spec.renew_time,
            None => true,
        };
        if changed {
            self.observed = Some((holder.clone(), spec.renew_time.clone(), Instant::now()));
        }
        let held_by_other = !holder.is_empty() && holder != self.identity;
        if held_by_other {
            let lease_duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(LEASE_DURATION, Duration::from_secs);
            let seen = self.observed.as_ref().map_or_else(Instant::now, |o| o.2);
            if seen.elapsed() < lease_duration {
                return Ok(false);
            }
        }
        let mut new = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(now.clone()),
            acquire_time: spec.acquire_time.clone(),
            lease_transitions: spec.lease_transitions,
            ..LeaseSpec::default()
        };
        if holder != self.identity {
            new.acquire_time = Some(now);
            new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        lease.spec = Some(new);
        match self
            .api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
        {
            Ok(l) => {
                let s = l.spec.unwrap_or_default();
                self.observed = Some((
                    s.holder_identity.unwrap_or_default(),
                    s.renew_time,
                    Instant::now(),
                ));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// `d` plus up to 20 % (client-go's JitterFactor 1.2 on the retry period).
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d + d.mul_f64(f64::from(nanos % 1000) / 5000.0)
}
