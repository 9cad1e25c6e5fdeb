//! Leader election through the `coordination.k8s.io` Lease `kube-system/kube-scheduler`, as
//! client-go's leaderelection does: acquire when free or expired, renew every retry period,
//! and stop when renewal fails for longer than the renew deadline.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

/// Lease duration (kube-scheduler's default, 15 s).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Renew deadline (10 s).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Retry period (2 s).
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The lease's namespace and name.
pub const LEASE_NAMESPACE: &str = "kube-system";
/// The lease's name.
pub const LEASE_NAME: &str = "kube-scheduler";

/// Tries once to acquire or renew the lease for `identity`; true when we hold it.
pub async fn try_acquire_or_renew(api: &Api<Lease>, identity: &str) -> anyhow::Result<bool> {
    let now = Timestamp::now();
    let existing = api.get_opt(LEASE_NAME).await?;
    let Some(mut lease) = existing else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(LEASE_NAME.into()),
                namespace: Some(LEASE_NAMESPACE.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(identity.into()),
                lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        };
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let duration = i64::from(
        spec.lease_duration_seconds
            .unwrap_or(LEASE_DURATION.as_secs() as i32),
    );
    let expired = spec
        .renew_time
        .as_ref()
        .is_none_or(|t| now.as_second() - t.0.as_second() > duration);
    if holder != identity && !holder.is_empty() && !expired {
        return Ok(false);
    }
    if holder != identity {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(identity.into());
    spec.lease_duration_seconds = Some(LEASE_DURATION.as_secs() as i32);
    spec.renew_time = Some(MicroTime(now));
    match api
        .replace(LEASE_NAME, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Waits until `identity` holds the lease (false when `shutdown` fires first).
pub async fn acquire(api: &Api<Lease>, identity: &str, shutdown: &CancellationToken) -> bool {
    loop {
        match try_acquire_or_renew(api, identity).await {
            Ok(true) => {
                tracing::info!(
                    identity,
                    "successfully acquired lease kube-system/kube-scheduler"
                );
                return true;
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "error acquiring the scheduler lease"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(RETRY_PERIOD) => {}
        }
    }
}

/// Renews the lease until `shutdown`; returns an error when leadership is lost.
pub async fn keep(
    api: Api<Lease>,
    identity: String,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(RETRY_PERIOD) => {}
        }
        match try_acquire_or_renew(&api, &identity).await {
            Ok(true) => last_ok = tokio::time::Instant::now(),
            Ok(false) => anyhow::bail!("leaderelection lost: another scheduler holds the lease"),
            Err(e) => {
                tracing::warn!(error = %e, "failed to renew the scheduler lease");
                if last_ok.elapsed() > RENEW_DEADLINE {
                    anyhow::bail!("leaderelection lost: could not renew within the deadline");
                }
            }
        }
    }
}
