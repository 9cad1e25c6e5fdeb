//! DELETE of one object and of a collection, as kube-apiserver's generic store does it:
//! DeleteOptions from the query and the body (validated), preconditions, graceful deletion
//! of pods (deletionTimestamp in the future, shortened by later deletes), the garbage
//! collector's `orphan`/`foregroundDeletion` finalizers from `propagationPolicy`, objects
//! with pending finalizers marked as deleting instead of removed, and upstream's response
//! shapes (the deleted object for pods, services and namespaces; a `Status` of Success for
//! everything else; the updated object when the object is still there).

use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};

use super::Filter;
use super::{Ctx, Query, conflict_or, dry_run, json_response, load, object, object_response};
use crate::error::{ApiError, FieldError, Result};
use crate::registry::{self, catalog::ResourceInfo};

/// Attempts of the read-modify-write that marks an object as being deleted.
const DELETE_RETRIES: usize = 5;
/// The garbage collector's finalizers.
const ORPHAN: &str = "orphan";
const FOREGROUND: &str = "foregroundDeletion";

/// The DeleteOptions that matter here, merged from the query string and the body.
#[derive(Debug, Default, Clone)]
struct DeleteOptions {
    grace_period: Option<i64>,
    propagation: Option<String>,
    orphan_dependents: Option<bool>,
    precondition_uid: Option<String>,
    precondition_rv: Option<String>,
}

impl DeleteOptions {
    /// Query parameters first, then the body's fields over them (as upstream decodes both).
    fn parse(headers: &HeaderMap, body: &[u8], q: &Query) -> Result<Self> {
        let mut o = DeleteOptions::default();
        if let Some(g) = q.get("gracePeriodSeconds") {
            o.grace_period = Some(g.parse().map_err(|_| {
                ApiError::BadRequest(format!(
                    "invalid value for gracePeriodSeconds: {g:?}: not an integer"
                ))
            })?);
        }
        if let Some(p) = q.get("propagationPolicy") {
            o.propagation = Some(p.clone());
        }
        if let Some(v) = q.get("orphanDependents") {
            o.orphan_dependents = Some(v == "true");
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(o);
        }
        let b = object::decode(headers, body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding DeleteOptions: {e}")))?;
        if let Some(g) = b.get("gracePeriodSeconds").filter(|v| !v.is_null()) {
            o.grace_period = Some(g.as_i64().ok_or_else(|| {
                ApiError::BadRequest("gracePeriodSeconds must be an integer".into())
            })?);
        }
        if let Some(p) = b.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = Some(p.to_owned());
        }
        if let Some(v) = b.get("orphanDependents").and_then(Value::as_bool) {
            o.orphan_dependents = Some(v);
        }
        if let Some(pre) = b.get("preconditions") {
            o.precondition_uid = pre.get("uid").and_then(Value::as_str).map(str::to_owned);
            o.precondition_rv = pre
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        Ok(o)
    }

    /// Upstream's `ValidateDeleteOptions`: a 422 on `DeleteOptions.meta.k8s.io`.
    fn validate(&self) -> Result<()> {
        let mut causes = Vec::new();
        if let (Some(p), Some(_)) = (&self.propagation, self.orphan_dependents) {
            causes.push(FieldError {
                reason: "FieldValueInvalid",
                field: "propagationPolicy".into(),
                message: format!(
                    "Invalid value: {p:?}: orphanDependents and deletionPropagation cannot be both set"
                ),
            });
        }
        if let Some(p) = self
            .propagation
            .as_deref()
            .filter(|p| !matches!(*p, "Foreground" | "Background" | "Orphan"))
        {
            causes.push(FieldError {
                reason: "FieldValueNotSupported",
                field: "propagationPolicy".into(),
                message: format!(
                    "Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            });
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::Invalid {
                group: "meta.k8s.io".into(),
                kind: "DeleteOptions".into(),
                name: String::new(),
                causes,
            })
        }
    }
}

/// Resources whose DELETE answers with the deleted object rather than a Status.
fn returns_deleted_object(r: &ResourceInfo) -> bool {
    r.group.is_empty() && matches!(r.plural, "pods" | "services" | "namespaces")
}

/// Only pods delete gracefully among the built-in kinds.
fn is_pod(r: &ResourceInfo) -> bool {
    r.group.is_empty() && r.plural == "pods"
}

fn finalizers(obj: &Map<String, Value>) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn meta_i64(obj: &Map<String, Value>, field: &str) -> Option<i64> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_i64)
}

fn timestamp_in(seconds: i64) -> String {
    let now = jiff::Timestamp::now().as_second();
    jiff::Timestamp::from_second(now.saturating_add(seconds))
        .map_or_else(|_| object::now(), |t| t.to_string())
}

fn shift_timestamp(ts: &str, seconds: i64) -> String {
    ts.parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| jiff::Timestamp::from_second(t.as_second().saturating_add(seconds)).ok())
        .map_or_else(|| timestamp_in(0), |t| t.to_string())
}

/// What `BeforeDelete` decided.
#[derive(Debug, PartialEq, Eq)]
enum Grace {
    /// Not a graceful delete: remove now (or mark deleting when finalizers are pending).
    None,
    /// The object was given (or had shortened) a deletionTimestamp; the period is in seconds.
    Set(i64),
    /// A graceful deletion is already under way and this request does not shorten it.
    Pending,
}

/// Upstream's `rest.BeforeDelete` for pods (the only graceful kind): sets the deletion
/// timestamp `period` seconds ahead, where period is the request's gracePeriodSeconds, else
/// the pod's terminationGracePeriodSeconds, and 0 for pods never scheduled or already done.
fn before_delete(r: &ResourceInfo, obj: &mut Map<String, Value>, opts: &DeleteOptions) -> Grace {
    let requested = opts.grace_period.map(|g| if g < 0 { 1 } else { g });
    if crate::crd::serve::is_crd(r) && object::meta_str(obj, "deletionTimestamp").is_empty() {
        crate::crd::serve::before_crd_delete(obj);
    }
    if !is_pod(r) {
        return Grace::None;
    }
    let existing_ts = object::meta_str(obj, "deletionTimestamp").to_owned();
    if !existing_ts.is_empty() {
        let current = meta_i64(obj, "deletionGracePeriodSeconds").unwrap_or(0);
        if current <= 0 {
            return Grace::None;
        }
        return match requested {
            Some(p) if p < current => {
                let ts = shift_timestamp(&existing_ts, p - current);
                if let Some(m) = object::meta(obj) {
                    m.insert("deletionTimestamp".into(), json!(ts));
                    m.insert("deletionGracePeriodSeconds".into(), json!(p));
                }
                Grace::Set(p)
            }
            _ => Grace::Pending,
        };
    }
    let spec = obj.get("spec");
    let mut period = requested.unwrap_or_else(|| {
        spec.and_then(|s| s.get("terminationGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    });
    let unscheduled = spec
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let phase = obj
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if unscheduled || matches!(phase, "Failed" | "Succeeded") {
        period = 0;
    }
    let ts = timestamp_in(period);
    if let Some(m) = object::meta(obj) {
        m.insert("deletionTimestamp".into(), json!(ts));
        m.insert("deletionGracePeriodSeconds".into(), json!(period));
        if let Some(g) = m
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
        {
            m.insert("generation".into(), json!(g + 1));
        }
    }
    Grace::Set(period)
}

/// The garbage collector's finalizers as the options (or the object's own, or the kind's
/// default policy) ask: `orphan` for Orphan, `foregroundDeletion` for Foreground. Returns
/// the new list when it differs from the object's.
fn gc_finalizers(
    r: &ResourceInfo,
    obj: &Map<String, Value>,
    opts: &DeleteOptions,
) -> Option<Vec<String>> {
    let current = finalizers(obj);
    let has = |f: &str| current.iter().any(|c| c == f);
    let (orphan, foreground) = if let Some(o) = opts.orphan_dependents {
        (o, false)
    } else if let Some(p) = opts.propagation.as_deref() {
        (p == "Orphan", p == "Foreground")
    } else if has(ORPHAN) {
        (true, false)
    } else if has(FOREGROUND) {
        (false, true)
    } else {
        // batch/v1 Jobs default to orphaning their pods (upstream keeps that for
        // compatibility); every other kind deletes dependents in the background.
        (r.group == "batch" && r.plural == "jobs", false)
    };
    let mut next: Vec<String> = current
        .iter()
        .filter(|f| *f != ORPHAN && *f != FOREGROUND)
        .cloned()
        .collect();
    if orphan {
        next.push(ORPHAN.into());
    }
    if foreground {
        next.push(FOREGROUND.into());
    }
    let same = next.len() == current.len() && next.iter().all(|f| current.contains(f));
    (!same).then_some(next)
}

/// Upstream's `markAsDeleting`: deletionTimestamp now (unless one is already earlier),
/// grace period 0, generation bumped on the first mark.
fn mark_as_deleting(obj: &mut Map<String, Value>) {
    let first = object::meta_str(obj, "deletionTimestamp").is_empty();
    let now = object::now();
    if let Some(m) = object::meta(obj) {
        if first
            && let Some(g) = m
                .get("generation")
                .and_then(Value::as_i64)
                .filter(|g| *g > 0)
        {
            m.insert("generation".into(), json!(g + 1));
        }
        let later = m
            .get("deletionTimestamp")
            .and_then(Value::as_str)
            .is_none_or(|ts| ts > now.as_str());
        if later {
            m.insert("deletionTimestamp".into(), json!(now));
        }
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
}

fn check_preconditions(
    r: &ResourceInfo,
    name: &str,
    obj: &Map<String, Value>,
    current: i64,
    opts: &DeleteOptions,
) -> Result<()> {
    let uid = object::meta_str(obj, "uid");
    if let Some(want) = opts.precondition_uid.as_deref().filter(|u| *u != uid) {
        return Err(ApiError::Conflict {
            resource: object::group_resource(r),
            name: name.into(),
            detail: format!(
                "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            ),
        });
    }
    let rv = current.to_string();
    if let Some(want) = opts.precondition_rv.as_deref().filter(|v| *v != rv) {
        return Err(ApiError::Conflict {
            resource: object::group_resource(r),
            name: name.into(),
            detail: format!(
                "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rv}). The object might have been modified"
            ),
        });
    }
    Ok(())
}

/// What one delete did.
enum Outcome {
    /// Removed from the store; carries the last state.
    Deleted(Map<String, Value>),
    /// Still there (graceful period running, finalizers pending); carries its state.
    Kept(Map<String, Value>),
}

/// Dynamic admission of a delete: the webhooks and the validating plugins (the stored
/// object is their `oldObject`).
async fn webhooks_for_delete(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    dry_run: bool,
) -> crate::error::Result<()> {
    let op = crate::admission::Operation::Delete;
    ctx.admission
        .admit_webhooks(op, r, namespace, name, dry_run, None, None)
        .await?;
    ctx.admission.validate_delete(r, namespace, name, dry_run)?;
    ctx.admission
        .validate_webhooks(op, r, namespace, name, dry_run, None, None, None)
        .await
}

/// DELETE of one object.
pub(super) async fn delete(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
) -> Result<axum::response::Response> {
    let opts = DeleteOptions::parse(headers, body, q)?;
    opts.validate()?;
    super::strategy::check_delete(r, name)?;
    ctx.admission.admit(
        crate::admission::Operation::Delete,
        r.group,
        r.plural,
        namespace,
        name,
        dry_run(q),
        None,
        None,
    )?;
    webhooks_for_delete(ctx, r, namespace, name, dry_run(q)).await?;
    let outcome = delete_one(ctx, r, namespace, name, &opts, dry_run(q)).await?;
    Ok(match outcome {
        Outcome::Kept(obj) => {
            let code = if opts.orphan_dependents == Some(false) {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            object_response(code, obj)
        }
        Outcome::Deleted(obj) if returns_deleted_object(r) => object_response(StatusCode::OK, obj),
        Outcome::Deleted(obj) => json_response(StatusCode::OK, &success_status(r, &obj)),
    })
}

/// Deletes one object with `options`, DeleteOptions as JSON (the `deleteOptions` of a
/// policy/v1 Eviction); `resource_version` becomes the precondition when the options set
/// none (the eviction REST's guard against racing a pod becoming ready).
pub(super) async fn delete_with_options(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    options: Option<&Value>,
    resource_version: Option<String>,
    dry: bool,
) -> Result<()> {
    let body = match options.filter(|o| o.is_object()) {
        Some(o) => serde_json::to_vec(o).map_err(|e| ApiError::Internal(e.to_string()))?,
        None => Vec::new(),
    };
    let mut opts = DeleteOptions::parse(&HeaderMap::new(), &body, &Query::new())?;
    if opts.precondition_rv.is_none() {
        opts.precondition_rv = resource_version;
    }
    opts.validate()?;
    delete_one(ctx, r, namespace, name, &opts, dry)
        .await
        .map(|_| ())
}

/// `Status` of Success naming what was deleted (upstream puts the resource in `kind`).
fn success_status(r: &ResourceInfo, obj: &Map<String, Value>) -> Value {
    let mut details = json!({
        "name": object::meta_str(obj, "name"),
        "kind": r.plural,
        "uid": object::meta_str(obj, "uid"),
    });
    if !r.group.is_empty() {
        details["group"] = json!(r.group);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

async fn delete_one(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    opts: &DeleteOptions,
    dry: bool,
) -> Result<Outcome> {
    let key = registry::key(r, namespace, name);
    for _ in 0..DELETE_RETRIES {
        let (obj, current) = load(ctx, r, namespace, name).await?;
        check_preconditions(r, name, &obj, current, opts)?;
        let mut next = obj.clone();
        let grace = before_delete(r, &mut next, opts);
        if grace == Grace::Pending {
            return Ok(Outcome::Kept(obj));
        }
        if let Some(f) = gc_finalizers(r, &next, opts)
            && let Some(m) = object::meta(&mut next)
        {
            m.insert("finalizers".into(), json!(f));
        }
        let pending_finalizers = !finalizers(&next).is_empty() || namespace_finalizing(r, &next);
        let remove_now = match grace {
            Grace::Set(period) => period == 0 && !pending_finalizers,
            _ => !pending_finalizers,
        };
        if remove_now && grace == Grace::None {
            // Nothing to record first: remove the stored revision we read.
            return match remove(ctx, r, &key, name, obj, current, dry).await {
                Err(ApiError::Conflict { .. }) if opts.precondition_rv.is_none() => continue,
                other => other,
            };
        }
        if grace == Grace::None {
            // Finalizers pending: the object stays, marked as being deleted.
            mark_as_deleting(&mut next);
            if r.plural == "namespaces" && r.group.is_empty() {
                next.insert("status".into(), json!({ "phase": "Terminating" }));
            }
        }
        if next == obj {
            // Already marked: nothing to write (upstream skips no-op updates too).
            return Ok(Outcome::Kept(obj));
        }
        if let Some(m) = object::meta(&mut next) {
            m.remove("resourceVersion");
        }
        let rev = if dry {
            current
        } else {
            let bytes = if registry::convert::needs_webhook(r) {
                object::encode(&crate::crd::conversion::to_storage(ctx, r, next.clone()).await?)?
            } else {
                object::encode(&registry::convert::storage_form(r, &next))?
            };
            match ctx
                .storage
                .update(&key, bytes, current)
                .await
                .map_err(|e| conflict_or(e, r, name))
            {
                Err(ApiError::Conflict { .. }) if opts.precondition_rv.is_none() => continue,
                other => other?,
            }
        };
        if let Some(m) = object::meta(&mut next) {
            m.insert("resourceVersion".into(), json!(rev.to_string()));
        }
        if !remove_now {
            return Ok(Outcome::Kept(next));
        }
        // A graceful delete with a zero period: recorded, then removed (another
        // component may win that race; the object is gone either way).
        return match remove(ctx, r, &key, name, next.clone(), rev, dry).await {
            Err(ApiError::NotFound { .. }) => Ok(Outcome::Deleted(next)),
            other => other,
        };
    }
    Err(ApiError::Conflict {
        resource: object::group_resource(r),
        name: name.into(),
        detail: super::MODIFIED.into(),
    })
}

/// A namespace is removed only once its `spec.finalizers` (the namespace controller's
/// `kubernetes`) are gone as well.
fn namespace_finalizing(r: &ResourceInfo, obj: &Map<String, Value>) -> bool {
    r.group.is_empty()
        && r.plural == "namespaces"
        && obj
            .get("spec")
            .and_then(|s| s.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
}

async fn remove(
    ctx: &Ctx,
    r: &ResourceInfo,
    key: &str,
    name: &str,
    obj: Map<String, Value>,
    revision: i64,
    dry: bool,
) -> Result<Outcome> {
    if !dry {
        ctx.storage
            .delete(key, revision)
            .await
            .map_err(|e| conflict_or(e, r, name))?;
        if super::is_service(r) {
            super::service::release(ctx, &super::service::held_keys(&obj)).await;
        }
    }
    Ok(Outcome::Deleted(obj))
}

/// Whether an update that removes the last finalizer of an object being deleted should
/// remove the object (upstream's `ShouldDeleteDuringUpdate`): the old object had
/// finalizers, the new has none, the deletion's grace period is over (0), and — for
/// namespaces — `spec.finalizers` is empty too.
pub(super) fn delete_during_update(
    r: &ResourceInfo,
    new: &Map<String, Value>,
    old: &Map<String, Value>,
) -> bool {
    !finalizers(old).is_empty()
        && finalizers(new).is_empty()
        && !object::meta_str(old, "deletionTimestamp").is_empty()
        && meta_i64(old, "deletionGracePeriodSeconds").unwrap_or(0) == 0
        && !namespace_finalizing(r, new)
}

/// DELETE of a collection: every object matching the list options, each deleted with the
/// request's DeleteOptions; answers with the list of what was selected.
pub(super) async fn delete_collection(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
) -> Result<axum::response::Response> {
    let opts = DeleteOptions::parse(headers, body, q)?;
    opts.validate()?;
    let filter = Filter::from_query(r, q)?;
    let prefix = registry::prefix(r, namespace);
    let page = ctx
        .storage
        .list(&prefix, None, 0, 0)
        .await
        .map_err(super::storage_error)?;
    let mut selected = Vec::new();
    for (_, stored) in page.items {
        let obj = object::from_stored(&stored.value, stored.revision)?;
        if !filter.matches(&obj) {
            continue;
        }
        let name = object::meta_str(&obj, "name").to_owned();
        let ns = object::meta_str(&obj, "namespace").to_owned();
        // Each object is judged as its own DELETE would be (upstream's DeleteCollection
        // deletes item by item with the admission chain's validation).
        super::strategy::check_delete(r, &name)?;
        ctx.admission.admit(
            crate::admission::Operation::Delete,
            r.group,
            r.plural,
            &ns,
            &name,
            dry_run(q),
            None,
            None,
        )?;
        webhooks_for_delete(ctx, r, &ns, &name, dry_run(q)).await?;
        match delete_one(ctx, r, &ns, &name, &opts, dry_run(q)).await {
            Ok(_) | Err(ApiError::NotFound { .. }) => {
                selected.push(obj);
            }
            Err(e) => return Err(e),
        }
    }
    // The answer's list is converted in one review when a conversion webhook converts it.
    let selected: Vec<Value> = crate::crd::conversion::from_storage(ctx, r, selected)
        .await?
        .into_iter()
        .map(Value::Object)
        .collect();
    let list = json!({
        "kind": format!("{}List", r.kind),
        "apiVersion": registry::api_version(r),
        "metadata": { "resourceVersion": page.revision.to_string() },
        "items": selected,
    });
    Ok(json_response(StatusCode::OK, &list))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(node: &str, tgps: Option<i64>) -> Map<String, Value> {
        let mut spec = json!({ "containers": [] });
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        if let Some(t) = tgps {
            spec["terminationGracePeriodSeconds"] = json!(t);
        }
        let v =
            json!({ "metadata": { "name": "p" }, "spec": spec, "status": { "phase": "Running" } });
        v.as_object().cloned().unwrap_or_default()
    }

    fn pods() -> &'static ResourceInfo {
        crate::registry::catalog::find("", "v1", "pods").expect("pods in the catalog")
    }

    #[test]
    fn scheduled_pods_get_their_grace_period_and_unscheduled_ones_none() {
        let opts = DeleteOptions::default();
        let mut p = pod("n1", Some(30));
        assert_eq!(before_delete(pods(), &mut p, &opts), Grace::Set(30));
        assert_eq!(meta_i64(&p, "deletionGracePeriodSeconds"), Some(30));
        let mut p = pod("", Some(30));
        assert_eq!(before_delete(pods(), &mut p, &opts), Grace::Set(0));
        let explicit = DeleteOptions {
            grace_period: Some(5),
            ..DeleteOptions::default()
        };
        let mut p = pod("n1", Some(30));
        assert_eq!(before_delete(pods(), &mut p, &explicit), Grace::Set(5));
    }

    #[test]
    fn a_pending_graceful_delete_may_only_be_shortened() {
        let mut p = pod("n1", Some(30));
        before_delete(pods(), &mut p, &DeleteOptions::default());
        let ts30 = object::meta_str(&p, "deletionTimestamp").to_owned();
        let longer = DeleteOptions {
            grace_period: Some(60),
            ..DeleteOptions::default()
        };
        assert_eq!(before_delete(pods(), &mut p, &longer), Grace::Pending);
        let shorter = DeleteOptions {
            grace_period: Some(10),
            ..DeleteOptions::default()
        };
        assert_eq!(before_delete(pods(), &mut p, &shorter), Grace::Set(10));
        let ts10 = object::meta_str(&p, "deletionTimestamp").to_owned();
        assert_eq!(shift_timestamp(&ts30, -20), ts10);
    }

    #[test]
    fn propagation_policy_sets_the_collectors_finalizers() {
        let cm = *pods();
        let obj = json!({ "metadata": { "name": "x", "finalizers": ["a"] } });
        let obj = obj.as_object().cloned().unwrap_or_default();
        let orphan = DeleteOptions {
            propagation: Some("Orphan".into()),
            ..DeleteOptions::default()
        };
        assert_eq!(
            gc_finalizers(&cm, &obj, &orphan),
            Some(vec!["a".to_owned(), ORPHAN.to_owned()])
        );
        let background = DeleteOptions {
            propagation: Some("Background".into()),
            ..DeleteOptions::default()
        };
        assert_eq!(gc_finalizers(&cm, &obj, &background), None);
    }

    #[test]
    fn invalid_options_are_rejected_as_upstream() {
        let bad = DeleteOptions {
            propagation: Some("Sideways".into()),
            ..DeleteOptions::default()
        };
        let err = bad
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
        );
    }
}
