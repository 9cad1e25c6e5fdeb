//! The CRD controllers of upstream's apiextensions-apiserver, run inside this server:
//! naming and establishing (each CRD's `status.acceptedNames`, `NamesAccepted` and
//! `Established` conditions, `storedVersions`), serving (the registry's custom resources
//! follow the established CRDs, so a new CRD is served within one pass of its creation), and
//! the `customresourcecleanup.apiextensions.k8s.io` finalizer (a deleted CRD's objects are
//! deleted first, then the CRD goes).
//!
//! One task follows the CRDs' watch-cache window: every change re-reads all CRDs (there are
//! few), writes the statuses that differ (compare-and-swap on each CRD's revision: a lost
//! race is the next pass's work), replaces the registry's custom set, and works on CRDs
//! being deleted. While one is, it also runs every second, until its objects are gone.
//!
//! Every write here is a status write as upstream's controllers make it (`UpdateStatus`
//! through kube-apiserver's loopback client): the field manager records it under the
//! manager `kube-apiserver`, subresource `status` ([`record_status_write`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::apply::managed;
use crate::handlers::Ctx;
use crate::patch::schema::{self, Ty};
use crate::registry::custom;
use crate::storage;

/// Where CRDs are stored.
pub const CRD_PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";
/// The finalizer that deletes a CRD's objects before the CRD itself.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
/// How often a pass runs while a CRD is being deleted.
const TERMINATING_PASS: Duration = Duration::from_secs(1);
/// How often a pass runs anyway (a missed change, a lost status race).
const RESYNC: Duration = Duration::from_secs(30);

/// Runs the controllers until the process ends.
pub async fn run(ctx: Arc<Ctx>) {
    let mut sub = ctx.watch_cache.subscribe(CRD_PREFIX, &[]);
    loop {
        // Mark the window as seen first: a change during the pass wakes the next one.
        let _ = sub.since(i64::MAX - 1);
        let busy = match pass(&ctx).await {
            Ok(busy) => busy,
            Err(err) => {
                tracing::warn!(%err, "CRD controller pass failed");
                true
            }
        };
        let wait = if busy { TERMINATING_PASS } else { RESYNC };
        tokio::select! {
            alive = sub.changed() => {
                if !alive {
                    tokio::time::sleep(TERMINATING_PASS).await;
                }
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// One pass over every CRD; `true` while a CRD is being deleted (more passes needed soon).
async fn pass(ctx: &Ctx) -> Result<bool, storage::Error> {
    let page = ctx.storage.list(CRD_PREFIX, None, 0, 0).await?;
    let mut crds: Vec<(String, i64, Value)> = page
        .items
        .into_iter()
        .filter_map(|(key, stored)| {
            let v: Value = serde_json::from_slice(&stored.value).ok()?;
            Some((key, stored.revision, v))
        })
        .collect();
    // Names are claimed first come, first served: the oldest CRD keeps a contested name.
    crds.sort_by(|a, b| {
        let created = |v: &Value| {
            v["metadata"]["creationTimestamp"]
                .as_str()
                .map(str::to_owned)
        };
        created(&a.2).cmp(&created(&b.2)).then(a.0.cmp(&b.0))
    });
    let mut others: Vec<Value> = crds.iter().map(|(_, _, c)| c.clone()).collect();
    for (i, (key, revision, crd)) in crds.iter_mut().enumerate() {
        let status = desired_status(crd, &others);
        if status != crd["status"] {
            let mut next = crd.clone();
            next["status"] = status;
            record_status_write(&mut next, crd);
            let bytes = crate::codec::go_json::to_vec(&next);
            match ctx.storage.update(key, bytes, *revision).await {
                Ok(rev) => {
                    *revision = rev;
                    *crd = next;
                }
                Err(storage::Error::Conflict | storage::Error::NotFound) => continue,
                Err(e) => return Err(e),
            }
        }
        others[i] = crd.clone();
    }
    let versions = crds
        .iter()
        .flat_map(|(_, _, crd)| custom::versions_of(crd))
        .collect();
    if ctx.registry.set_custom(versions) {
        tracing::info!(
            served = ctx.registry.custom_resources().len(),
            "custom resources changed"
        );
    }
    let mut busy = false;
    for (key, revision, crd) in &crds {
        if crd["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        busy = true;
        if let Err(err) = finalize(ctx, key, *revision, crd).await {
            tracing::warn!(%err, crd = %key, "deleting a CRD's objects");
        }
    }
    Ok(busy)
}

/// The manager of the controllers' writes: upstream's loopback client's User-Agent
/// (`kube-apiserver/v1.33.…`) as the field manager derives it.
const MANAGER: &str = "kube-apiserver";

/// Records in `next` the field manager's entry for the status write turning `old` into
/// `next`, as kube-apiserver records its controllers' `UpdateStatus` calls: an `Update` by
/// [`MANAGER`] with subresource `status`, owning the status fields it changed (the
/// conditions keyed by `type`).
fn record_status_write(next: &mut Value, old: &Value) {
    let ty = schema::root("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
        .unwrap_or(Ty::Untyped);
    if let (Value::Object(new), Value::Object(old)) = (next, old) {
        managed::record_update(new, old, ty, MANAGER, "apiextensions.k8s.io/v1", "status");
    }
}

/// The status the naming and establishing controllers give `crd` (`others`: every CRD,
/// with the names each has accepted so far).
fn desired_status(crd: &Value, others: &[Value]) -> Value {
    let now = jiff::Timestamp::now();
    let mut working = crd.clone();
    if let Some(status) = super::naming::naming_status(&working, others, now) {
        working["status"] = status;
    }
    if let Some(status) = super::naming::established_status(&working, now) {
        working["status"] = status;
    }
    working["status"].clone()
}

/// The storage prefix of every object of `crd` (all its versions share it).
fn objects_prefix(crd: &Value) -> Option<String> {
    let group = crd["spec"]["group"].as_str().filter(|g| !g.is_empty())?;
    let plural = crd["status"]["acceptedNames"]["plural"]
        .as_str()
        .or_else(|| crd["spec"]["names"]["plural"].as_str())
        .filter(|p| !p.is_empty())?;
    Some(format!("/registry/{group}/{plural}/"))
}

/// The cleanup finalizer's work on a CRD being deleted: delete its objects (those with
/// finalizers are marked and waited for), then remove the finalizer, which removes the CRD.
async fn finalize(ctx: &Ctx, key: &str, revision: i64, crd: &Value) -> Result<(), storage::Error> {
    let finalizers: Vec<&str> = crd["metadata"]["finalizers"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !finalizers.contains(&CLEANUP_FINALIZER) {
        // Someone else's finalizers hold it: nothing of ours left to do.
        if finalizers.is_empty() {
            match ctx.storage.delete(key, revision).await {
                Ok(_) | Err(storage::Error::Conflict | storage::Error::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        return Ok(());
    }
    let remaining = match objects_prefix(crd) {
        Some(prefix) => delete_objects(ctx, &prefix).await?,
        None => 0,
    };
    let mut next = crd.clone();
    let now = jiff::Timestamp::now();
    if remaining > 0 {
        next["status"] =
            super::naming::terminating_status(crd, &super::naming::Termination::InProgress, now);
        if next != *crd {
            record_status_write(&mut next, crd);
            let bytes = crate::codec::go_json::to_vec(&next);
            match ctx.storage.update(key, bytes, revision).await {
                Ok(_) | Err(storage::Error::Conflict | storage::Error::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        return Ok(());
    }
    // Every object is gone: the finalizer goes, and with it (no other finalizer) the CRD.
    let others: Vec<&str> = finalizers
        .into_iter()
        .filter(|f| *f != CLEANUP_FINALIZER)
        .collect();
    if others.is_empty() {
        match ctx.storage.delete(key, revision).await {
            Ok(_) => tracing::info!(crd = %key, "CRD deleted after its objects"),
            Err(storage::Error::Conflict | storage::Error::NotFound) => {}
            Err(e) => return Err(e),
        }
        return Ok(());
    }
    next["metadata"]["finalizers"] = json!(others);
    next["status"] =
        super::naming::terminating_status(crd, &super::naming::Termination::Completed, now);
    record_status_write(&mut next, crd);
    let bytes = crate::codec::go_json::to_vec(&next);
    match ctx.storage.update(key, bytes, revision).await {
        Ok(_) | Err(storage::Error::Conflict | storage::Error::NotFound) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the objects under `prefix` that have no finalizers and marks the others as being
/// deleted; returns how many are left.
async fn delete_objects(ctx: &Ctx, prefix: &str) -> Result<usize, storage::Error> {
    let page = ctx.storage.list(prefix, None, 0, 0).await?;
    let mut remaining = 0;
    for (key, stored) in page.items {
        let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(&stored.value) else {
            continue;
        };
        let has_finalizers = obj
            .get("metadata")
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if !has_finalizers {
            match ctx.storage.delete(&key, stored.revision).await {
                Ok(_) | Err(storage::Error::NotFound) => continue,
                Err(storage::Error::Conflict) => {
                    remaining += 1;
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        remaining += 1;
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut()
            && !meta.contains_key("deletionTimestamp")
        {
            meta.insert("deletionTimestamp".into(), json!(now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            let bytes = serde_json::to_vec(&obj).unwrap_or_default();
            match ctx.storage.update(&key, bytes, stored.revision).await {
                Ok(_) | Err(storage::Error::Conflict | storage::Error::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(remaining)
}

/// Now as `metav1.Time` (RFC 3339, whole seconds).
pub fn now() -> String {
    let ts = jiff::Timestamp::now();
    jiff::Timestamp::from_second(ts.as_second()).map_or_else(|_| ts.to_string(), |t| t.to_string())
}
