//! The repair loop of Service addresses (kube-apiserver's ClusterIP and NodePort repair
//! controllers): reservations and Services are compared every interval, so what a crash or
//! an older version left behind heals without an admin.
//!
//! - A Service whose cluster IP or node port has no reservation gets it back (upstream's
//!   `ClusterIPNotAllocated` / `PortNotAllocated` repair), so no other Service is given it.
//! - A reservation no Service uses is released once it has been seen unused on
//!   [`PASSES_BEFORE_RELEASE`] passes in a row (upstream's `numRepairsBeforeLeakCleanup`):
//!   a create in flight holds its reservation for moments, never for several passes.

use std::collections::{HashMap, HashSet};

use super::Ctx;
use super::service::held_keys;
use crate::registry;
use crate::storage;

/// Passes a reservation must be seen unused before it is released.
pub(crate) const PASSES_BEFORE_RELEASE: u32 = 3;

/// Where the reservations live (see `service.rs`).
const PREFIXES: [&str; 2] = [
    "/registry/core/serviceips/",
    "/registry/core/servicenodeports/",
];

/// What one pass found and did, for the log and tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Reservations written back for Services that lacked them.
    pub(crate) restored: usize,
    /// Unused reservations released.
    pub(crate) released: usize,
    /// Unused reservations still waiting for more passes.
    pub(crate) suspected: usize,
}

/// The repair loop's memory between passes: how many passes in a row each unused
/// reservation has been seen.
#[derive(Debug, Default)]
pub(crate) struct Repair {
    unused: HashMap<String, u32>,
}

impl Repair {
    /// One pass: reservations are read after the Services, so a Service created in between
    /// only makes its reservation look unused once.
    pub(crate) async fn run_once(&mut self, ctx: &Ctx) -> storage::Result<Pass> {
        let mut pass = Pass::default();
        let Some(services) = ctx.registry.find("", "v1", "services") else {
            return Ok(pass);
        };
        let page = ctx
            .storage
            .list(&registry::prefix(services, ""), None, 0, 0)
            .await?;
        let mut used: HashMap<String, String> = HashMap::new();
        for (_, stored) in &page.items {
            let Ok(obj) = super::object::from_stored(&stored.value, stored.revision) else {
                continue;
            };
            let owner = format!(
                "{}/{}",
                super::object::meta_str(&obj, "namespace"),
                super::object::meta_str(&obj, "name")
            );
            for key in held_keys(&obj) {
                used.entry(key).or_insert_with(|| owner.clone());
            }
        }
        let mut reserved = HashSet::new();
        for prefix in PREFIXES {
            let page = ctx.storage.list(prefix, None, 0, 0).await?;
            for (key, stored) in page.items {
                if used.contains_key(&key) {
                    self.unused.remove(&key);
                } else {
                    let seen = self.unused.entry(key.clone()).or_default();
                    *seen += 1;
                    if *seen >= PASSES_BEFORE_RELEASE {
                        match ctx.storage.delete(&key, stored.revision).await {
                            Ok(_) => {
                                tracing::info!(%key, "released an address no Service uses");
                                pass.released += 1;
                            }
                            // Taken again meanwhile: looked at anew next pass.
                            Err(err) => tracing::debug!(%key, %err, "not released"),
                        }
                        self.unused.remove(&key);
                    } else {
                        pass.suspected += 1;
                    }
                }
                reserved.insert(key);
            }
        }
        // Forget reservations that went away by themselves.
        self.unused.retain(|k, _| reserved.contains(k));
        for (key, owner) in used {
            if reserved.contains(&key) {
                continue;
            }
            match ctx.storage.create(&key, owner.clone().into_bytes()).await {
                Ok(_) => {
                    tracing::warn!(%key, service = %owner, "a Service's address had no reservation; restored");
                    pass.restored += 1;
                }
                Err(storage::Error::AlreadyExists) => {}
                Err(err) => tracing::warn!(%key, %err, "restoring a reservation"),
            }
        }
        Ok(pass)
    }
}

/// Runs a pass every `interval` (zero disables) until the task is dropped.
pub(crate) async fn run(ctx: std::sync::Arc<Ctx>, interval: std::time::Duration) {
    if interval.is_zero() {
        return;
    }
    let mut repair = Repair::default();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match repair.run_once(&ctx).await {
            Ok(pass) if pass != Pass::default() => {
                tracing::info!(?pass, "repaired Service address reservations");
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(%err, "Service address repair pass failed"),
        }
    }
}
