//! MutatingAdmissionWebhook and ValidatingAdmissionWebhook (upstream's
//! `k8s.io/apiserver/pkg/admission/plugin/webhook`): the webhooks of the stored
//! `MutatingWebhookConfiguration`s and `ValidatingWebhookConfiguration`s, called with an
//! `AdmissionReview` for each request they match.
//!
//! - Mutating webhooks run after the built-in mutating plugins, one after the other in
//!   configuration-name order; their JSON patches apply to the object the next one sees.
//!   With `reinvocationPolicy: IfNeeded` a webhook is called once more when a later one
//!   changed the object (the built-in plugins are not run again).
//! - Validating webhooks run after object validation, all at once.
//! - `failurePolicy: Ignore` lets a request through when the webhook cannot be called or
//!   answers nonsense (with upstream's `failed-open…` audit annotation); a denial, a patch
//!   that does not apply and a dry run to a webhook with side effects always fail.
//! - `matchPolicy: Equivalent` matches a rule at another version of the same resource; the
//!   object is sent as requested (not converted to the rule's version).
//! - Exempt, as upstream: the admission configuration objects themselves. Writes made
//!   inside the server (not through a request) never reach admission.
//! - `matchConditions` (CEL over `object`, `oldObject`, `request` and `authorizer`):
//!   any false skips the webhook; an error fails as calling it would (`failurePolicy`).

pub mod client;
pub mod coalesce;
pub mod config;
pub mod transport;

use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, GroupResource, Result};
use crate::registry::catalog::ResourceInfo;
use crate::storage::Storage;
use config::{Configurations, Hook};

/// Both kinds of configuration, followed from the store.
pub struct Webhooks {
    mutating: Option<Configurations>,
    validating: Option<Configurations>,
}

/// One request as the webhooks see it.
pub struct Call<'a> {
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'a str,
    /// The served resource.
    pub resource: &'a ResourceInfo,
    /// Subresource.
    pub subresource: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// Name (from the object on create).
    pub name: &'a str,
    /// Dry run.
    pub dry_run: bool,
    /// Who asks.
    pub user: &'a crate::pipeline::UserInfo,
    /// The object's kind when it is not the resource's (a CONNECT's options:
    /// `PodExecOptions`, …; always core v1).
    pub options_kind: Option<&'a str>,
    /// The object already encoded as JSON (a create's stored bytes, in Go's field order as
    /// upstream's review carries it): validating reviews embed these bytes instead of
    /// encoding the object once per webhook.
    pub object_json: Option<&'a [u8]>,
}

/// Why calling a webhook failed (upstream's `ErrCallingWebhook` versus the rest).
enum Failure {
    /// Not reached or not understood: `failurePolicy` decides.
    Calling(String),
    /// Anything else: always refuses.
    Refused(ApiError),
}

impl Webhooks {
    /// Follows the configurations of the enabled plugins.
    pub fn new(mutating: bool, validating: bool) -> Webhooks {
        Webhooks {
            mutating: mutating.then(|| Configurations::new(true)),
            validating: validating.then(|| Configurations::new(false)),
        }
    }

    /// The mutating webhooks now stored (empty when none or the plugin is off).
    pub fn mutating(&self, storage: &Storage) -> Arc<Vec<Hook>> {
        match &self.mutating {
            Some(c) => c.current(storage),
            None => Arc::new(Vec::new()),
        }
    }

    /// The validating webhooks now stored.
    pub fn validating(&self, storage: &Storage) -> Arc<Vec<Hook>> {
        match &self.validating {
            Some(c) => c.current(storage),
            None => Arc::new(Vec::new()),
        }
    }
}

/// The webhooks of `hooks` that `call` must go to, with their indexes.
fn matching<'h>(
    storage: &Storage,
    hooks: &'h [Hook],
    call: &Call<'_>,
    obj: Option<&Map<String, Value>>,
    old: Option<&Map<String, Value>>,
) -> Result<Vec<(usize, &'h Hook)>> {
    let r = call.resource;
    if config::exempt(r.group, r.plural) {
        return Ok(Vec::new());
    }
    let target = config::Target {
        operation: call.operation,
        group: r.group,
        version: r.version,
        resource: r.plural,
        subresource: call.subresource,
        namespace: call.namespace,
    };
    let mut ns_labels: Option<Option<Value>> = None;
    let mut out = Vec::new();
    for (i, h) in hooks.iter().enumerate() {
        if !h.namespace_selector.is_empty()
            && (!call.namespace.is_empty() || r.plural == "namespaces")
        {
            if ns_labels.is_none() {
                ns_labels = Some(namespace_labels(storage, call, obj)?);
            }
            if !h
                .namespace_selector
                .matches(ns_labels.as_ref().and_then(Option::as_ref))
            {
                continue;
            }
        }
        if !h.object_selector.is_empty()
            && !h.object_selector.matches(config::labels(obj))
            && !h.object_selector.matches(config::labels(old))
        {
            continue;
        }
        if !h.rules_match(&target) {
            continue;
        }
        out.push((i, h));
    }
    Ok(out)
}

/// The labels of the request's namespace (of the namespace object itself for namespaces).
fn namespace_labels(
    storage: &Storage,
    call: &Call<'_>,
    obj: Option<&Map<String, Value>>,
) -> Result<Option<Value>> {
    if call.resource.plural == "namespaces"
        && call.subresource.is_empty()
        && matches!(call.operation, "CREATE" | "UPDATE")
    {
        return Ok(config::labels(obj).cloned());
    }
    let name = if call.namespace.is_empty() {
        call.name
    } else {
        call.namespace
    };
    let Some(r) = crate::registry::catalog::find("", "v1", "namespaces") else {
        return Ok(None);
    };
    let stored = storage
        .get_local(&crate::registry::key(r, "", name))
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let Some(stored) = stored else {
        return Err(ApiError::NotFound {
            resource: GroupResource::new("", "namespaces"),
            name: name.to_owned(),
        });
    };
    let ns: Value = serde_json::from_slice(&stored.value).unwrap_or(Value::Null);
    Ok(ns["metadata"].get("labels").cloned())
}

/// A group, version and kind (`kind`, `requestKind`).
#[derive(serde::Serialize, Clone, Copy)]
struct Gvk<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
}

/// A group, version and resource (`resource`, `requestResource`).
#[derive(serde::Serialize, Clone, Copy)]
struct Gvr<'a> {
    group: &'a str,
    version: &'a str,
    resource: &'a str,
}

/// `request.userInfo`.
#[derive(serde::Serialize, Clone, Copy)]
struct UserOut<'a> {
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    groups: &'a [String],
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    extra: &'a std::collections::BTreeMap<String, Vec<String>>,
}

/// `request.options` (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
#[derive(serde::Serialize, Clone, Copy)]
struct OptionsOut {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    #[serde(rename = "dryRun", skip_serializing_if = "Option::is_none")]
    dry_run: Option<[&'static str; 1]>,
}

/// `AdmissionReview.request`, borrowing the objects (serialised once, never copied).
#[derive(serde::Serialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct RequestOut<'a> {
    uid: &'a str,
    kind: Gvk<'a>,
    resource: Gvr<'a>,
    #[serde(skip_serializing_if = "str::is_empty")]
    sub_resource: &'a str,
    request_kind: Gvk<'a>,
    request_resource: Gvr<'a>,
    #[serde(skip_serializing_if = "str::is_empty")]
    request_sub_resource: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    operation: &'a str,
    user_info: UserOut<'a>,
    object: Option<&'a Map<String, Value>>,
    old_object: Option<&'a Map<String, Value>>,
    dry_run: bool,
    options: Option<OptionsOut>,
}

/// An `AdmissionReview` to send.
#[derive(serde::Serialize, Clone, Copy)]
struct ReviewOut<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    request: RequestOut<'a>,
}

/// The `AdmissionReview` sent for `call` in `version` (`v1` or `v1beta1`).
fn review_out<'a>(
    version: &str,
    uid: &'a str,
    call: &'a Call<'a>,
    obj: Option<&'a Map<String, Value>>,
    old: Option<&'a Map<String, Value>>,
) -> ReviewOut<'a> {
    let r = call.resource;
    // A subresource's object is of its own kind (Eviction, Binding, Scale, …).
    let sub = (!call.subresource.is_empty())
        .then(|| r.subresource(call.subresource))
        .flatten();
    let kind = || match (call.options_kind, sub) {
        (Some(k), _) => Gvk {
            group: "",
            version: "v1",
            kind: k,
        },
        (None, Some(s)) => Gvk {
            group: s.group,
            version: s.version,
            kind: s.kind,
        },
        (None, None) => Gvk {
            group: r.group,
            version: r.version,
            kind: r.kind,
        },
    };
    let resource = || Gvr {
        group: r.group,
        version: r.version,
        resource: r.plural,
    };
    let options_kind = match call.operation {
        "CREATE" => Some("CreateOptions"),
        "UPDATE" => Some("UpdateOptions"),
        "DELETE" => Some("DeleteOptions"),
        _ => None,
    };
    let user = call.user;
    ReviewOut {
        kind: "AdmissionReview",
        api_version: if version == "v1beta1" {
            "admission.k8s.io/v1beta1"
        } else {
            "admission.k8s.io/v1"
        },
        request: RequestOut {
            uid,
            kind: kind(),
            resource: resource(),
            sub_resource: call.subresource,
            request_kind: kind(),
            request_resource: resource(),
            request_sub_resource: call.subresource,
            name: call.name,
            namespace: call.namespace,
            operation: call.operation,
            user_info: UserOut {
                username: &user.name,
                uid: &user.uid,
                groups: &user.groups,
                extra: &user.extra,
            },
            object: obj,
            old_object: old,
            dry_run: call.dry_run,
            options: options_kind.map(|kind| OptionsOut {
                api_version: "meta.k8s.io/v1",
                kind,
                dry_run: call.dry_run.then_some(["All"]),
            }),
        },
    }
}

/// [`review_out`] as JSON.
#[cfg(test)]
fn review(
    version: &str,
    uid: &str,
    call: &Call<'_>,
    obj: Option<&Map<String, Value>>,
    old: Option<&Map<String, Value>>,
) -> Value {
    serde_json::to_value(review_out(version, uid, call, obj, old)).unwrap_or(Value::Null)
}

/// Upstream's match conditions: `Ok(false)` when one is false, an error when one fails to
/// compile or evaluate (and none is false).
fn conditions_match(
    hook: &Hook,
    request: &Value,
    obj: Option<&Map<String, Value>>,
    old: Option<&Map<String, Value>>,
) -> std::result::Result<bool, String> {
    use kube_cel::cel::Value as Cel;
    if hook.match_conditions.is_empty() {
        return Ok(true);
    }
    let cel = |v: Option<&Map<String, Value>>| match v {
        Some(m) => kube_cel::cel::to_value(m).unwrap_or(Cel::Null),
        None => Cel::Null,
    };
    let mut ctx = crate::admission::cel_env::root().new_inner_scope();
    ctx.add_variable_from_value("object", cel(obj));
    ctx.add_variable_from_value("oldObject", cel(old));
    ctx.add_variable_from_value(
        "request",
        kube_cel::cel::to_value(request).unwrap_or(Cel::Null),
    );
    // `authorizer` (upstream's authorizer library) asks the request's authorizer.
    let current = crate::admission::shared();
    if let Some(r) = &current {
        ctx.add_variable_from_value("authorizer", crate::admission::cel_authz::variable(&r.info));
    }
    let evaluate = || {
        let mut errors = Vec::new();
        for condition in &hook.match_conditions {
            let name = &condition.name;
            let result = match condition.program.as_ref() {
                Ok(p) => p.execute(&ctx).map_err(|e| e.to_string()),
                Err(e) => Err(e.clone()),
            };
            match result {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => return Ok(false),
                Ok(_) => errors.push(format!(
                    "failed to evaluate match condition {name:?}: cel expression must evaluate to bool"
                )),
                Err(e) => errors.push(format!("failed to evaluate match condition {name:?}: {e}")),
            }
        }
        match errors.is_empty() {
            true => Ok(true),
            false => Err(errors.join(", ")),
        }
    };
    match current
        .as_ref()
        .and_then(|r| Some((r.authorizer.as_ref()?, &r.user)))
    {
        Some((a, user)) => crate::admission::cel_authz::with(a.0.clone(), user, evaluate),
        None => evaluate(),
    }
}

/// A webhook's verdict (upstream's `webhookrequest.AdmissionResponse`).
#[derive(Debug, Default, PartialEq)]
struct Verdict {
    allowed: bool,
    status: Map<String, Value>,
    patch: Option<Vec<u8>>,
    warnings: Vec<String>,
    audit: Vec<(String, String)>,
}

/// Upstream's `VerifyAdmissionResponse`: the answer's kind, uid and patch type checked.
fn verdict(
    version: &str,
    uid: &str,
    mutating: bool,
    answer: &[u8],
) -> std::result::Result<Verdict, String> {
    let review: Map<String, Value> = serde_json::from_slice(answer).map_err(|e| {
        format!("failed to call webhook: couldn't get version/kind; json parse error: {e}")
    })?;
    let invalid = |e: String| format!("received invalid webhook response: {e}");
    let text = |o: &Map<String, Value>, k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if version == "v1" {
        let api_version = text(&review, "apiVersion");
        let (g, v) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let got = format!("{g}/{v}, Kind={}", text(&review, "kind"));
        let want = "admission.k8s.io/v1, Kind=AdmissionReview";
        if got != want {
            return Err(invalid(format!(
                "expected webhook response of {want}, got {got}"
            )));
        }
    }
    let Some(Value::Object(response)) = review.get("response") else {
        return Err(invalid("webhook response was absent".into()));
    };
    let got_uid = text(response, "uid");
    if version == "v1" && got_uid != uid {
        return Err(invalid(format!(
            "expected response.uid={uid:?}, got {got_uid:?}"
        )));
    }
    let patch = match response.get("patch").and_then(Value::as_str) {
        Some(p) if !p.is_empty() => Some(
            base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| invalid(e.to_string()))?,
        ),
        _ => None,
    };
    let mut patch_type = text(response, "patchType");
    if version == "v1beta1" && patch.is_some() && patch_type.is_empty() {
        patch_type = "JSONPatch".into();
    }
    if mutating {
        match (patch_type.as_str(), patch.is_some()) {
            ("", false) | ("JSONPatch", true) => {}
            ("", true) => {
                return Err(invalid(
                    "webhook returned response.patch but not response.patchType".into(),
                ));
            }
            (_, false) => {
                return Err(invalid(
                    "webhook returned response.patchType but not response.patch".into(),
                ));
            }
            (t, true) => {
                return Err(invalid(format!(
                    "webhook returned invalid response.patchType of {t:?}"
                )));
            }
        }
    } else if patch.is_some() || !patch_type.is_empty() {
        return Err(invalid(
            "validating webhook may not return response.patch or response.patchType".into(),
        ));
    }
    Ok(Verdict {
        allowed: response.get("allowed") == Some(&Value::Bool(true)),
        status: response
            .get("status")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        patch,
        warnings: response
            .get("warnings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        audit: response
            .get("auditAnnotations")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect(),
    })
}

/// Upstream's `ToStatusErr`: the webhook's own status handed on, its code raised to 403 when
/// below 400 (or missing), its reason and details kept, its message prefixed with the hook.
fn denial(hook: &str, status: &Map<String, Value>) -> ApiError {
    let field = |k: &str| status.get(k).and_then(Value::as_str).unwrap_or("");
    let denied = format!("admission webhook {hook:?} denied the request");
    let message = match (field("message"), field("reason")) {
        ("", "") => format!("{denied} without explanation"),
        ("", reason) => format!("{denied}: {reason}"),
        (m, _) => format!("{denied}: {m}"),
    };
    let code = match status.get("code").and_then(Value::as_i64) {
        Some(c) if c >= 400 => u16::try_from(c).unwrap_or(u16::MAX),
        _ => 403,
    };
    ApiError::Status {
        code,
        reason: field("reason").to_owned(),
        message,
        details: status.get("details").filter(|d| d.is_object()).cloned(),
    }
}

/// Calls `hook` with `call` and returns its verdict (`None`: a match condition is false).
async fn call_hook(
    storage: &Storage,
    hook: &Hook,
    call: &Call<'_>,
    mutating: bool,
    obj: Option<&Map<String, Value>>,
    old: Option<&Map<String, Value>>,
) -> std::result::Result<Option<Verdict>, Failure> {
    let failed =
        |e: String| Failure::Calling(format!("failed calling webhook {:?}: {e}", hook.name));
    let version = hook
        .review_versions
        .iter()
        .find(|v| *v == "v1" || *v == "v1beta1");
    let uid = request_uid();
    let review = review_out(version.map_or("v1", |v| v.as_str()), &uid, call, obj, old);
    if !hook.match_conditions.is_empty() {
        // `request` without the objects (they are variables of their own).
        let request = RequestOut {
            object: None,
            old_object: None,
            ..review_out("v1", &uid, call, None, None).request
        };
        let request = serde_json::to_value(request).map_err(|e| failed(e.to_string()))?;
        if !conditions_match(hook, &request, obj, old).map_err(failed)? {
            return Ok(None);
        }
    }
    if call.dry_run && !hook.dry_run_safe {
        return Err(Failure::Refused(ApiError::BadRequest(format!(
            "admission webhook {:?} does not support dry run",
            hook.name
        ))));
    }
    let Some(version) = version else {
        return Err(failed(
            "webhook does not accept known AdmissionReview versions".into(),
        ));
    };
    let encoded = call.object_json.filter(|_| !mutating && obj.is_some());
    let body = match encoded {
        Some(json) => review_body_with(&review, json),
        None => review_body(&review),
    }
    .map_err(|e| failed(e.to_string()))?;
    let resolved;
    let target = match &hook.url_target {
        Some(Ok(target)) => target,
        Some(Err(e)) => return Err(failed(format!("failed to call webhook: {e}"))),
        None => {
            resolved = client::resolve(storage, &hook.client, hook.timeout)
                .map_err(|e| failed(format!("failed to call webhook: {e}")))?;
            &resolved
        }
    };
    let answer = client::post(target, body, hook.timeout, "context deadline exceeded")
        .await
        .map_err(|e| failed(format!("failed to call webhook: {e}")))?;
    verdict(version, &uid, mutating, &answer)
        .map(Some)
        .map_err(failed)
}

/// `review` as JSON, in a buffer sized from the last review written (no growing and copying
/// as it is written: a review carries the whole object).
fn review_body(review: &ReviewOut<'_>) -> serde_json::Result<Vec<u8>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static LAST: AtomicUsize = AtomicUsize::new(4096);
    let mut body = Vec::with_capacity(LAST.load(Ordering::Relaxed).clamp(1024, 1 << 20) + 512);
    serde_json::to_writer(&mut body, review)?;
    LAST.store(body.len(), Ordering::Relaxed);
    Ok(body)
}

/// `review` as JSON with `object` written as `json` (already-encoded JSON of the same
/// object): the review is written without it, then the bytes go where its `null` is.
fn review_body_with(review: &ReviewOut<'_>, json: &[u8]) -> serde_json::Result<Vec<u8>> {
    const AT: &[u8] = b"\"object\":null,\"oldObject\":";
    let bare = ReviewOut {
        request: RequestOut {
            object: None,
            ..review.request
        },
        ..*review
    };
    let mut head = Vec::with_capacity(1024);
    serde_json::to_writer(&mut head, &bare)?;
    // The last occurrence is the request's own field: strings cannot hold it unescaped,
    // and only `oldObject`, `dryRun` and `options` follow it.
    let Some(at) = head.windows(AT.len()).rposition(|w| w == AT) else {
        return review_body(review);
    };
    let null = at + b"\"object\":".len();
    let mut body = Vec::with_capacity(head.len() + json.len());
    body.extend_from_slice(&head[..null]);
    body.extend_from_slice(json);
    body.extend_from_slice(&head[null + b"null".len()..]);
    Ok(body)
}

/// A fresh `request.uid` (a random v4 UUID): one seed from the OS per thread, then a
/// SplitMix64 stream, so a call costs no `getrandom` system call.
fn request_uid() -> String {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let seed = uuid::Uuid::new_v4().as_u64_pair();
            seed.0 ^ seed.1
        });
    }
    let next = || {
        STATE.with(|s| {
            let x = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
            s.set(x);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
    };
    let bytes = (u128::from(next()) << 64 | u128::from(next())).to_le_bytes();
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// `apiserver_admission_webhook_*` for one call.
fn observe(
    hook: &Hook,
    call: &Call<'_>,
    kind: &str,
    started: Instant,
    rejection: Option<(&str, u16)>,
) {
    crate::metrics::observe_webhook(
        &hook.name,
        call.operation,
        kind,
        started.elapsed().as_secs_f64(),
        rejection,
    );
}

/// Runs the mutating webhooks matching `call` over `obj`.
pub async fn mutate(
    storage: &Storage,
    hooks: &[Hook],
    call: &Call<'_>,
    mut obj: Option<&mut Map<String, Value>>,
    old: Option<&Map<String, Value>>,
) -> Result<()> {
    let matched = matching(storage, hooks, call, obj.as_deref(), old)?;
    // Upstream's reinvocation: an IfNeeded webhook called before the last change is called
    // once more, after the first round.
    let mut called: Vec<(usize, &Hook)> = Vec::new();
    let mut last_change: Option<usize> = None;
    for round in 0..2 {
        let list: Vec<(usize, &Hook)> = if round == 0 {
            matched.clone()
        } else {
            let Some(last) = last_change else { break };
            called
                .iter()
                .copied()
                .filter(|(i, h)| h.reinvoke && *i < last)
                .collect()
        };
        if list.is_empty() {
            break;
        }
        for (i, hook) in list {
            let started = Instant::now();
            let before = obj.as_deref().cloned();
            let result = call_hook(storage, hook, call, true, obj.as_deref(), old).await;
            let changed = match result {
                Ok(None) => continue,
                Err(Failure::Refused(e)) => {
                    observe(
                        hook,
                        call,
                        "admit",
                        started,
                        Some(("no_error", e.code().as_u16())),
                    );
                    return Err(e);
                }
                Err(Failure::Calling(e)) => {
                    observe(
                        hook,
                        call,
                        "admit",
                        started,
                        (!hook.ignore_failures).then_some(("calling_webhook_error", 0)),
                    );
                    if hook.ignore_failures {
                        let name = &hook.name;
                        let why = "failed calling webhook, failing open";
                        tracing::warn!(webhook = %name, err = %e, "{why}");
                        let key = "failed-open.mutation.webhook.admission.k8s.io";
                        let key = format!("{key}/round_{round}_index_{i}");
                        crate::admission::audit_annotation(&key, name);
                        continue;
                    }
                    return Err(ApiError::Internal(format!("Internal error occurred: {e}")));
                }
                Ok(Some(v)) if !v.allowed => {
                    let err = denial(&hook.name, &v.status);
                    observe(
                        hook,
                        call,
                        "admit",
                        started,
                        Some(("no_error", err.code().as_u16())),
                    );
                    return Err(err);
                }
                Ok(Some(v)) => {
                    for w in v.warnings {
                        crate::admission::warn(w);
                    }
                    for (k, val) in v.audit {
                        crate::admission::audit_annotation(&format!("{}/{k}", hook.name), &val);
                    }
                    if let (Some(p), Some(o)) = (v.patch, obj.as_deref_mut())
                        && let Err(e) = apply_patch(o, &p)
                    {
                        let internal = Some(("apiserver_internal_error", 500));
                        observe(hook, call, "admit", started, internal);
                        return Err(ApiError::Internal(format!("Internal error occurred: {e}")));
                    }
                    observe(hook, call, "admit", started, None);
                    obj.as_deref() != before.as_ref()
                }
            };
            let annotation = json!({
                "configuration": hook.configuration,
                "webhook": hook.name,
                "mutated": changed,
            });
            crate::admission::audit_annotation(
                &format!("mutation.webhook.admission.k8s.io/round_{round}_index_{i}"),
                &annotation.to_string(),
            );
            if round == 0 {
                called.push((i, hook));
                if changed {
                    last_change = Some(i);
                }
            }
        }
        if round == 0 && last_change.is_none() {
            break;
        }
    }
    Ok(())
}

/// Applies a JSON patch a webhook answered to `obj`.
fn apply_patch(obj: &mut Map<String, Value>, patch: &[u8]) -> std::result::Result<(), String> {
    let patch: json_patch::Patch = serde_json::from_slice(patch).map_err(|e| e.to_string())?;
    let mut doc = Value::Object(std::mem::take(obj));
    let applied = json_patch::patch(&mut doc, &patch).map_err(|e| e.to_string());
    match doc {
        Value::Object(m) => *obj = m,
        _ => return Err("the patched object is not a JSON object".into()),
    }
    applied
}

/// Runs the validating webhooks matching `call`, all at once; the first refusal (in
/// configuration order) is the answer.
pub async fn validate(
    storage: &Storage,
    hooks: &[Hook],
    call: &Call<'_>,
    obj: Option<&Map<String, Value>>,
    old: Option<&Map<String, Value>>,
) -> Result<()> {
    let matched = matching(storage, hooks, call, obj, old)?;
    if matched.is_empty() {
        return Ok(());
    }
    let calls = matched
        .iter()
        .map(|(i, hook)| validate_one(storage, *i, hook, call, obj, old));
    let results = futures_util::future::join_all(calls).await;
    match results.into_iter().flatten().next() {
        Some(Failure::Calling(e)) => {
            Err(ApiError::Internal(format!("Internal error occurred: {e}")))
        }
        Some(Failure::Refused(e)) => Err(e),
        None => Ok(()),
    }
}

/// Calls one validating webhook: `None` when it lets the request through.
async fn validate_one(
    storage: &Storage,
    i: usize,
    hook: &Hook,
    call: &Call<'_>,
    obj: Option<&Map<String, Value>>,
    old: Option<&Map<String, Value>>,
) -> Option<Failure> {
    let started = Instant::now();
    match call_hook(storage, hook, call, false, obj, old).await {
        Ok(None) => None,
        Err(Failure::Refused(e)) => Some(Failure::Refused(e)),
        Err(Failure::Calling(e)) => {
            let calling = (!hook.ignore_failures).then_some(("calling_webhook_error", 0));
            observe(hook, call, "validating", started, calling);
            if !hook.ignore_failures {
                return Some(Failure::Calling(e));
            }
            tracing::warn!(webhook = %hook.name, err = %e, "failed calling webhook, failing open");
            crate::admission::audit_annotation(
                &format!("failed-open.validating.webhook.admission.k8s.io/round_0_index_{i}"),
                &hook.name,
            );
            None
        }
        Ok(Some(v)) => {
            for w in &v.warnings {
                crate::admission::warn(w.clone());
            }
            for (k, val) in &v.audit {
                crate::admission::audit_annotation(&format!("{}/{k}", hook.name), val);
            }
            if v.allowed {
                observe(hook, call, "validating", started, None);
                return None;
            }
            let err = denial(&hook.name, &v.status);
            let code = err.code().as_u16();
            observe(hook, call, "validating", started, Some(("no_error", code)));
            Some(Failure::Refused(err))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> &'static ResourceInfo {
        crate::registry::catalog::find("", "v1", "pods").unwrap()
    }

    fn call(user: &crate::pipeline::UserInfo) -> Call<'_> {
        Call {
            operation: "CREATE",
            resource: pods(),
            subresource: "",
            namespace: "default",
            name: "p",
            dry_run: true,
            user,
            options_kind: None,
            object_json: None,
        }
    }

    fn answer(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).unwrap()
    }

    #[test]
    fn reviews_carry_kind_resource_user_options_and_objects() {
        let user = crate::pipeline::UserInfo::anonymous();
        let obj = json!({ "metadata": { "name": "p" } });
        let r = review("v1", "u", &call(&user), obj.as_object(), None);
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(
            r["request"]["kind"],
            json!({ "group": "", "version": "v1", "kind": "Pod" })
        );
        assert_eq!(r["request"]["resource"]["resource"], "pods");
        assert_eq!(r["request"]["userInfo"]["username"], "system:anonymous");
        assert_eq!(r["request"]["options"]["kind"], "CreateOptions");
        assert_eq!(r["request"]["options"]["dryRun"], json!(["All"]));
        assert_eq!(r["request"]["dryRun"], true);
        assert_eq!(r["request"]["object"], obj);
        assert_eq!(r["request"]["oldObject"], Value::Null);
        assert_eq!(r["request"]["namespace"], "default");
        let beta = review("v1beta1", "u", &call(&user), None, None);
        assert_eq!(beta["apiVersion"], "admission.k8s.io/v1beta1");
    }

    #[test]
    fn reviews_embed_an_encoded_object_as_it_is() {
        let mut user = crate::pipeline::UserInfo::anonymous();
        // A user whose name spells the field the bytes go into changes nothing.
        user.name = r#""object":null,"oldObject":"#.into();
        let obj =
            json!({ "metadata": { "name": "p", "uid": "x" }, "apiVersion": "v1", "kind": "Pod" });
        let encoded = crate::codec::go_json::object_to_vec(obj.as_object().unwrap());
        let c = call(&user);
        let review = review_out("v1", "u", &c, obj.as_object(), None);
        let with = review_body_with(&review, &encoded).unwrap();
        let plain = review_body(&review).unwrap();
        let parsed = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap();
        let mut expected = parsed(&plain);
        expected["request"]["object"] = parsed(&encoded);
        assert_eq!(parsed(&with), expected);
        // The object's bytes are the encoded ones (Go's field order: apiVersion first).
        let text = String::from_utf8(with).unwrap();
        assert!(
            text.contains(r#""object":{"kind":"Pod","apiVersion":"v1","metadata""#),
            "{text}"
        );
    }

    #[test]
    fn answers_are_verified_as_upstream() {
        let ok = |uid: &str, extra: Value| {
            let mut response = json!({ "uid": uid, "allowed": true });
            if let (Some(r), Value::Object(e)) = (response.as_object_mut(), extra) {
                r.extend(e);
            }
            answer(
                &json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "response": response }),
            )
        };
        assert!(
            verdict("v1", "u", false, &ok("u", json!({})))
                .unwrap()
                .allowed
        );
        assert_eq!(
            verdict("v1", "u", false, &ok("x", json!({}))).unwrap_err(),
            "received invalid webhook response: expected response.uid=\"u\", got \"x\""
        );
        let patch = base64::engine::general_purpose::STANDARD.encode("[]");
        assert_eq!(
            verdict("v1", "u", true, &ok("u", json!({ "patch": patch }))).unwrap_err(),
            "received invalid webhook response: webhook returned response.patch but not response.patchType"
        );
        let typed = json!({ "patch": patch, "patchType": "JSONPatch" });
        assert_eq!(
            verdict("v1", "u", true, &ok("u", typed.clone()))
                .unwrap()
                .patch,
            Some(b"[]".to_vec())
        );
        assert!(verdict("v1", "u", false, &ok("u", typed)).is_err());
        let wrong = answer(&json!({ "apiVersion": "v1", "kind": "Status" }));
        assert_eq!(
            verdict("v1", "u", false, &wrong).unwrap_err(),
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /v1, Kind=Status"
        );
        assert!(
            verdict("v1", "u", false, b"garbage")
                .unwrap_err()
                .starts_with(
                    "failed to call webhook: couldn't get version/kind; json parse error:"
                )
        );
        // v1beta1: no kind or uid check, patchType defaults to JSONPatch.
        let beta = answer(&json!({ "response": { "allowed": true, "patch": patch,
            "warnings": ["w"], "auditAnnotations": { "k": "v" } } }));
        let v = verdict("v1beta1", "u", true, &beta).unwrap();
        assert_eq!(v.warnings, ["w"]);
        assert_eq!(v.audit, [("k".to_owned(), "v".to_owned())]);
    }

    #[test]
    fn denials_read_as_upstream() {
        let status = |v: Value| v.as_object().cloned().unwrap();
        let e = denial(
            "x.example.com",
            &status(json!({ "code": 403, "message": "no" })),
        );
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.to_string(),
            "admission webhook \"x.example.com\" denied the request: no"
        );
        // No reason given: none sent, as upstream.
        assert!(e.status().get("reason").is_none());
        // Below 400 (or none): 403 with the webhook's reason kept.
        let e = denial("x.example.com", &status(json!({ "reason": "why" })));
        assert_eq!(e.code(), 403);
        assert_eq!(e.status()["reason"], "why");
        assert_eq!(
            e.to_string(),
            "admission webhook \"x.example.com\" denied the request: why"
        );
        let e = denial("x.example.com", &Map::new());
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.to_string(),
            "admission webhook \"x.example.com\" denied the request without explanation"
        );
        // Code, reason and details handed on as given.
        let e = denial(
            "x.example.com",
            &status(
                json!({ "code": 429, "reason": "TooManyRequests", "message": "slow down",
                "details": { "retryAfterSeconds": 5, "causes": [{ "message": "c" }] } }),
            ),
        );
        let s = e.status();
        assert_eq!(s["code"], 429);
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(
            s["message"],
            "admission webhook \"x.example.com\" denied the request: slow down"
        );
        assert_eq!(
            s["details"],
            json!({ "retryAfterSeconds": 5, "causes": [{ "message": "c" }] })
        );
        let e = denial("x.example.com", &status(json!({ "code": 200 })));
        assert_eq!(e.code(), 403);
    }

    #[test]
    fn match_conditions_skip_on_false_and_fail_on_errors() {
        let user = crate::pipeline::UserInfo::anonymous();
        let obj = json!({ "metadata": { "name": "cond-1" } });
        let req = review("v1", "u", &call(&user), obj.as_object(), None)["request"].clone();
        let mut cfg = json!({ "metadata": { "name": "c" }, "webhooks": [{ "name": "h",
            "matchConditions": [
                { "name": "named", "expression": "object.metadata.name.startsWith('cond-')" },
                { "name": "created", "expression": "request.operation == 'CREATE' && oldObject == null" }
            ] }] });
        let hook = config::parse_configuration(&cfg, false).remove(0);
        assert_eq!(
            conditions_match(&hook, &req, obj.as_object(), None),
            Ok(true)
        );
        let other = json!({ "metadata": { "name": "x" } });
        assert_eq!(
            conditions_match(&hook, &req, other.as_object(), None),
            Ok(false)
        );
        cfg["webhooks"][0]["matchConditions"] =
            json!([{ "name": "broken", "expression": "object.nothing.here" }]);
        let hook = config::parse_configuration(&cfg, false).remove(0);
        let err = conditions_match(&hook, &req, obj.as_object(), None).unwrap_err();
        assert!(
            err.starts_with("failed to evaluate match condition \"broken\": "),
            "{err}"
        );
    }

    #[test]
    fn patches_apply_or_fail() {
        let mut obj = json!({ "metadata": { "name": "p" } })
            .as_object()
            .cloned()
            .unwrap();
        apply_patch(
            &mut obj,
            br#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#,
        )
        .unwrap();
        assert_eq!(obj["metadata"]["labels"]["a"], "b");
        assert!(
            apply_patch(
                &mut obj,
                br#"[{"op":"replace","path":"/spec/x","value":1}]"#
            )
            .is_err()
        );
        assert!(apply_patch(&mut obj, b"{}").is_err());
        assert_eq!(obj["metadata"]["name"], "p");
    }
}
