//! The kubelet client CSR approver (`csrapproving`, upstream
//! `pkg/controller/certificates/approver`): a pending request for
//! `kubernetes.io/kube-apiserver-client-kubelet` that is a valid node client request
//! (`O=system:nodes`, `CN=system:node:<name>`, no SANs, client usages) is approved when a
//! SubjectAccessReview says its requester may `create` `certificatesigningrequests/selfnodeclient`
//! (the requester is the node named in the CN — certificate rotation) or
//! `certificatesigningrequests/nodeclient` (any node: bootstrap). The approval goes through the
//! `approval` subresource with reason `AutoApproved`; the signer then issues the certificate.
//! Requests that match neither stay pending for a person to judge.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::csr_signing::{KUBELET_CLIENT, has_true, judge, parse_request};
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture};

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Whether the CSR's requester may create `certificatesigningrequests/<subresource>`.
async fn allowed(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    subresource: &str,
) -> Result<bool, ReconcileError> {
    let spec = &csr.spec;
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: spec.username.clone(),
            uid: spec.uid.clone(),
            groups: spec.groups.clone(),
            extra: spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: Some(subresource.into()),
                verb: Some("create".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(ctx.client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Approves `name` if it is a node client request its requester may make.
async fn sync(ctx: Context, csrs: Store<CertificateSigningRequest>, name: String) -> SyncResult {
    let Some(csr) = csrs.get(&ObjectRef::new(&name)) else {
        return Ok(None);
    };
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    if issued
        || has_true(&csr, "Approved")
        || has_true(&csr, "Denied")
        || csr.spec.signer_name != KUBELET_CLIENT
    {
        return Ok(None);
    }
    let pem = String::from_utf8_lossy(&csr.spec.request.0).into_owned();
    let Ok(request) = parse_request(&pem) else {
        return Ok(None);
    };
    let usages = csr.spec.usages.clone().unwrap_or_default();
    if judge(KUBELET_CLIENT, &request, &usages) != Some(Ok(())) {
        return Ok(None);
    }
    let own = csr.spec.username.as_deref() == Some(request.common_name.as_str());
    let message = if own && allowed(&ctx, &csr, "selfnodeclient").await? {
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    } else if allowed(&ctx, &csr, "nodeclient").await? {
        "Auto approving kubelet client certificate after SubjectAccessReview."
    } else {
        tracing::debug!(csr = %name, "node client request not auto-approved: not permitted");
        return Ok(None);
    };
    let mut approved = (*csr).clone();
    let now = Time(jiff::Timestamp::now());
    approved
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("AutoApproved".into()),
            message: Some(message.into()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    match api
        .replace_subresource("approval", &name, &PostParams::default(), &approved)
        .await
    {
        Ok(_) => {
            tracing::info!(csr = %name, "auto-approved node client certificate request");
            Ok(None)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(Duration::from_millis(200))),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(ReconcileError::Kube(e)),
    }
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let csrs = crate::csr_signing::watch(&ctx, queue.clone(), shutdown.clone());
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = csrs.wait_until_ready() => r?,
    }
    for csr in csrs.state() {
        if let Some(n) = csr.metadata.name.clone() {
            queue.add(n);
        }
    }
    let c = ctx.clone();
    run_workers(&ctx, &queue, 1, &shutdown, move |key| {
        sync(c.clone(), csrs.clone(), key)
    })
    .await;
    Ok(())
}
