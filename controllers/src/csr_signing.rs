//! The CSR signer (`csrsigning`, upstream `pkg/controller/certificates/signer`): signs
//! approved CertificateSigningRequests of the built-in signers with the cluster CA
//! (`--cluster-signing-cert-file` / `--cluster-signing-key-file`; `capstan server` passes its
//! own CA) and writes the certificate through the `status` subresource.
//!
//! - `kubernetes.io/kube-apiserver-client`: client certificates for any subject; usages
//!   among digital signature, key encipherment and client auth, client auth required.
//! - `kubernetes.io/kube-apiserver-client-kubelet`: `O=system:nodes`,
//!   `CN=system:node:<name>`, no SANs, usages exactly digital signature + client auth
//!   (+ key encipherment).
//! - `kubernetes.io/kubelet-serving`: `O=system:nodes`, `CN=system:node:<name>`, DNS or IP
//!   SANs, server auth usages.
//! - `kubernetes.io/legacy-unknown` (and any other signer) is never signed.
//!
//! A request its signer refuses gets a `Failed` condition (`SignerValidationFailure`) and is
//! never looked at again; a denied, failed or already issued one is skipped. The
//! certificate's lifetime is `--cluster-signing-duration` (one year), shortened to
//! `spec.expirationSeconds` and to the CA's own expiry; it starts five minutes back
//! (unless shorter than eight hours, as upstream's policy), subject and SANs from the request.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use rcgen::{
    CertificateSigningRequestParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use tokio_util::sync::CancellationToken;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture};

/// Client certificates for kube-apiserver.
const API_SERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Kubelets' client certificates.
pub(crate) const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Kubelets' serving certificates.
const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// How far back a certificate's validity starts.
const BACKDATE: time::Duration = time::Duration::minutes(5);
/// Certificates shorter than this keep their full lifetime after the backdate.
const SHORT: time::Duration = time::Duration::hours(8);

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// The CA that signs, and how long its certificates live.
struct Signer {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate's `notAfter`: no certificate outlives it.
    ca_not_after: time::OffsetDateTime,
    /// `--cluster-signing-duration`.
    max_duration: Duration,
}

impl Signer {
    fn load(cert: &Path, key: &Path, max_duration: Duration) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let cert_pem =
            std::fs::read_to_string(cert).with_context(|| format!("reading {}", cert.display()))?;
        let key_pem =
            std::fs::read_to_string(key).with_context(|| format!("reading {}", key.display()))?;
        let key =
            KeyPair::from_pem(&key_pem).with_context(|| format!("parsing {}", key.display()))?;
        let (_, block) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
            .map_err(|e| anyhow::anyhow!("parsing {}: {e}", cert.display()))?;
        let (_, ca) = x509_parser::certificate::X509Certificate::from_der(&block.contents)
            .map_err(|e| anyhow::anyhow!("parsing {}: {e}", cert.display()))?;
        let ca_not_after = ca.validity().not_after.to_datetime();
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key)
            .with_context(|| format!("loading the CA {}", cert.display()))?;
        Ok(Signer {
            issuer,
            ca_not_after,
            max_duration,
        })
    }

    /// Signs the PEM request for `usages`, valid for `expiration_seconds` (capped).
    fn sign(
        &self,
        request_pem: &str,
        usages: &[String],
        expiration_seconds: Option<i32>,
    ) -> anyhow::Result<String> {
        let mut req = CertificateSigningRequestParams::from_pem(request_pem)
            .map_err(|e| anyhow::anyhow!("reading the certificate request: {e}"))?;
        let mut ttl = self.max_duration;
        if let Some(secs) = expiration_seconds.and_then(|s| u64::try_from(s).ok()) {
            ttl = ttl.min(Duration::from_secs(secs));
        }
        let ttl = time::Duration::try_from(ttl).unwrap_or(time::Duration::days(365));
        let now = time::OffsetDateTime::now_utc();
        let params = &mut req.params;
        params.distinguished_name = subject(request_pem)?;
        params.not_before = now - BACKDATE;
        params.not_after = if ttl < SHORT {
            now + ttl
        } else {
            now + ttl - BACKDATE
        };
        if params.not_after > self.ca_not_after {
            params.not_after = self.ca_not_after;
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        let mut serial = uuid::Uuid::new_v4().into_bytes().to_vec();
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from(serial));
        params.key_usages.clear();
        params.extended_key_usages.clear();
        for usage in usages {
            let (ku, eku) = key_usage(usage);
            params.key_usages.extend(ku);
            params.extended_key_usages.extend(eku);
        }
        let cert = req
            .signed_by(&self.issuer)
            .map_err(|e| anyhow::anyhow!("signing: {e}"))?;
        Ok(cert.pem())
    }
}

/// The request's subject in order. rcgen's reading keeps one value per attribute type; a
/// repeated type (two `O`s: a user in two groups) is kept under the same OID spelled as a
/// custom type, so two values of a type survive (a third is dropped, with a warning).
fn subject(request_pem: &str) -> anyhow::Result<rcgen::DistinguishedName> {
    let (_, block) = x509_parser::pem::parse_x509_pem(request_pem.as_bytes())
        .map_err(|_| anyhow::anyhow!("PEM block type must be CERTIFICATE REQUEST"))?;
    let (_, req) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| anyhow::anyhow!("parsing the certificate request: {e}"))?;
    let mut dn = rcgen::DistinguishedName::new();
    let mut seen: Vec<Vec<u64>> = Vec::new();
    for attr in req.certification_request_info.subject.iter_attributes() {
        let Some(oid) = attr.attr_type().iter().map(Iterator::collect::<Vec<u64>>) else {
            continue;
        };
        let Ok(value) = attr.as_str() else {
            continue;
        };
        let repeats = seen.iter().filter(|o| **o == oid).count();
        let ty = match repeats {
            0 => rcgen::DnType::from_oid(&oid),
            1 => rcgen::DnType::CustomDnType(oid.clone()),
            _ => {
                tracing::warn!(
                    ?oid,
                    value,
                    "a third subject attribute of one type is dropped"
                );
                continue;
            }
        };
        seen.push(oid);
        dn.push(ty, value);
    }
    Ok(dn)
}

/// Upstream's `keyUsagesFromStrings` for one usage.
fn key_usage(usage: &str) -> (Option<KeyUsagePurpose>, Option<ExtendedKeyUsagePurpose>) {
    use ExtendedKeyUsagePurpose as E;
    use KeyUsagePurpose as K;
    match usage {
        "signing" | "digital signature" => (Some(K::DigitalSignature), None),
        "content commitment" => (Some(K::ContentCommitment), None),
        "key encipherment" => (Some(K::KeyEncipherment), None),
        "key agreement" => (Some(K::KeyAgreement), None),
        "data encipherment" => (Some(K::DataEncipherment), None),
        "cert sign" => (Some(K::KeyCertSign), None),
        "crl sign" => (Some(K::CrlSign), None),
        "encipher only" => (Some(K::EncipherOnly), None),
        "decipher only" => (Some(K::DecipherOnly), None),
        "any" => (None, Some(E::Any)),
        "server auth" => (None, Some(E::ServerAuth)),
        "client auth" => (None, Some(E::ClientAuth)),
        "code signing" => (None, Some(E::CodeSigning)),
        "email protection" | "s/mime" => (None, Some(E::EmailProtection)),
        "ipsec end system" => (None, Some(E::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 5]))),
        "ipsec tunnel" => (None, Some(E::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 6]))),
        "ipsec user" => (None, Some(E::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 7]))),
        "timestamping" => (None, Some(E::TimeStamping)),
        "ocsp signing" => (None, Some(E::OcspSigning)),
        "microsoft sgc" => (None, Some(E::Other(vec![1, 3, 6, 1, 4, 1, 311, 10, 3, 3]))),
        "netscape sgc" => (None, Some(E::Other(vec![2, 16, 840, 1, 113_730, 4, 1]))),
        _ => (None, None),
    }
}

/// What the signer reads of a request: subject and SANs.
#[derive(Debug, Default)]
pub(crate) struct Request {
    /// The subject's CN.
    pub(crate) common_name: String,
    organizations: Vec<String>,
    dns: usize,
    ips: usize,
    emails: usize,
    uris: usize,
}

/// The subject and SAN counts of a PEM request.
pub(crate) fn parse_request(pem: &str) -> anyhow::Result<Request> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|_| anyhow::anyhow!("PEM block type must be CERTIFICATE REQUEST"))?;
    let (_, req) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| anyhow::anyhow!("parsing the certificate request: {e}"))?;
    let subject = &req.certification_request_info.subject;
    let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        a.as_str().map(str::to_owned).unwrap_or_default()
    };
    let mut out = Request {
        common_name: subject
            .iter_common_name()
            .next()
            .map(text)
            .unwrap_or_default(),
        organizations: subject.iter_organization().map(text).collect(),
        ..Request::default()
    };
    for ext in req.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(_) => out.dns += 1,
                    GeneralName::IPAddress(_) => out.ips += 1,
                    GeneralName::RFC822Name(_) => out.emails += 1,
                    GeneralName::URI(_) => out.uris += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(out)
}

/// Whether `signer` is one this controller signs for, and if so the signer's verdict on the
/// request (upstream's `isRequestForSignerFn`): `None` not ours, `Some(Err)` refused.
pub(crate) fn judge(signer: &str, req: &Request, usages: &[String]) -> Option<Result<(), String>> {
    let set: BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    let nodes = || -> Result<(), String> {
        if req.organizations != ["system:nodes"] {
            return Err("subject organization is not system:nodes".into());
        }
        Ok(())
    };
    let node_cn = || -> Result<(), String> {
        if !req.common_name.starts_with("system:node:") {
            return Err("subject common name does not begin with system:node:".into());
        }
        Ok(())
    };
    let exact = |wanted: &[&str], optional: &str| -> Result<(), String> {
        let want: BTreeSet<&str> = wanted.iter().copied().collect();
        let mut with_optional = want.clone();
        with_optional.insert(optional);
        if set == want || set == with_optional {
            return Ok(());
        }
        let listed: Vec<&str> = with_optional.into_iter().collect();
        Err(format!("usages did not match [{}]", listed.join(" ")))
    };
    let verdict = match signer {
        API_SERVER_CLIENT => (|| {
            for u in &set {
                if !matches!(*u, "digital signature" | "key encipherment" | "client auth") {
                    return Err(format!("invalid usage for client certificate: {u}"));
                }
            }
            if !set.contains("client auth") {
                return Err("missing required usage for client certificate: client auth".into());
            }
            Ok(())
        })(),
        KUBELET_CLIENT => (|| {
            nodes()?;
            for (count, kind) in [
                (req.dns, "DNS"),
                (req.emails, "Email"),
                (req.ips, "IP"),
                (req.uris, "URI"),
            ] {
                if count > 0 {
                    return Err(format!("{kind} subjectAltNames are not allowed"));
                }
            }
            node_cn()?;
            exact(&["digital signature", "client auth"], "key encipherment")
        })(),
        KUBELET_SERVING => (|| {
            nodes()?;
            if req.dns == 0 && req.ips == 0 {
                return Err("DNS or IP subjectAltName is required".into());
            }
            if req.emails > 0 {
                return Err("Email subjectAltNames are not allowed".into());
            }
            if req.uris > 0 {
                return Err("URI subjectAltNames are not allowed".into());
            }
            exact(&["digital signature", "server auth"], "key encipherment")?;
            node_cn()
        })(),
        _ => return None,
    };
    Some(verdict)
}

/// Whether the CSR has condition `ty` with status True.
pub(crate) fn has_true(csr: &CertificateSigningRequest, ty: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == ty && c.status == "True"))
}

/// Signs `name` if it is approved, not denied or failed, not issued, and for a signer here.
async fn sync(
    ctx: Context,
    signer: Arc<Signer>,
    csrs: Store<CertificateSigningRequest>,
    name: String,
) -> SyncResult {
    let Some(csr) = csrs.get(&ObjectRef::new(&name)) else {
        return Ok(None);
    };
    let status = csr.status.clone().unwrap_or_default();
    if status.certificate.as_ref().is_some_and(|c| !c.0.is_empty())
        || !has_true(&csr, "Approved")
        || has_true(&csr, "Denied")
        || has_true(&csr, "Failed")
    {
        return Ok(None);
    }
    let spec = &csr.spec;
    let pem = String::from_utf8_lossy(&spec.request.0).into_owned();
    let usages = spec.usages.clone().unwrap_or_default();
    let request = match parse_request(&pem) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(csr = %name, error = %e, "unreadable certificate request");
            return Ok(None);
        }
    };
    let Some(verdict) = judge(&spec.signer_name, &request, &usages) else {
        return Ok(None);
    };
    let mut updated = (*csr).clone();
    let now = Time(jiff::Timestamp::now());
    let st = updated.status.get_or_insert_with(Default::default);
    match verdict {
        Err(why) => {
            tracing::info!(csr = %name, signer = %spec.signer_name, %why, "refusing to sign");
            st.conditions
                .get_or_insert_with(Vec::new)
                .push(CertificateSigningRequestCondition {
                    type_: "Failed".into(),
                    status: "True".into(),
                    reason: Some("SignerValidationFailure".into()),
                    message: Some(why),
                    last_update_time: Some(now.clone()),
                    last_transition_time: Some(now),
                });
        }
        Ok(()) => {
            let cert = signer
                .sign(&pem, &usages, spec.expiration_seconds)
                .map_err(|e| ReconcileError::Other(format!("{e:#}")))?;
            st.certificate = Some(k8s_openapi::ByteString(cert.into_bytes()));
            tracing::info!(csr = %name, signer = %spec.signer_name, "signed certificate");
        }
    }
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    match api
        .replace_status(&name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(None),
        // Stale cache: look again once the watch catches up.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(Duration::from_millis(200))),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(ReconcileError::Kube(e)),
    }
}

/// A reflector of every CSR (with the signer's own client, allowed to list and watch them)
/// queueing each changed one by name.
pub(crate) fn watch(
    ctx: &Context,
    queue: Queue,
    shutdown: CancellationToken,
) -> Store<CertificateSigningRequest> {
    use futures_util::StreamExt as _;
    use kube::runtime::WatchStreamExt as _;
    let (reader, writer) = kube::runtime::reflector::store();
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    let stream = kube::runtime::reflector::reflector(
        writer,
        watcher::watcher(api, watcher::Config::default()),
    )
    .default_backoff()
    .applied_objects();
    tokio::spawn(async move {
        let mut stream = stream.boxed();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                ev = stream.next() => match ev {
                    None => return,
                    Some(Err(e)) => tracing::debug!(error = %e, "CSR watch failed"),
                    Some(Ok(csr)) => {
                        if let Some(name) = csr.metadata.name {
                            queue.add(name);
                        }
                    }
                }
            }
        }
    });
    reader
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (Some(cert), Some(key)) = (
        ctx.options.cluster_signing_cert_file.clone(),
        ctx.options.cluster_signing_key_file.clone(),
    ) else {
        tracing::info!(
            "csrsigning: no --cluster-signing-cert-file/--cluster-signing-key-file; not signing"
        );
        shutdown.cancelled().await;
        return Ok(());
    };
    let signer = Arc::new(Signer::load(
        &cert,
        &key,
        ctx.options.cluster_signing_duration,
    )?);
    let queue = Queue::default();
    let csrs = watch(&ctx, queue.clone(), shutdown.clone());
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
        sync(c.clone(), signer.clone(), csrs.clone(), key)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cn: &str, orgs: &[&str], dns: usize) -> Request {
        Request {
            common_name: cn.into(),
            organizations: orgs.iter().map(|o| (*o).to_owned()).collect(),
            dns,
            ..Request::default()
        }
    }

    fn usages(u: &[&str]) -> Vec<String> {
        u.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn signers_judge_as_upstream() {
        let any = request("alice", &["dev"], 0);
        assert_eq!(
            judge(API_SERVER_CLIENT, &any, &usages(&["client auth"])),
            Some(Ok(()))
        );
        assert_eq!(
            judge(API_SERVER_CLIENT, &any, &usages(&["server auth"])),
            Some(Err(
                "invalid usage for client certificate: server auth".into()
            ))
        );
        assert_eq!(
            judge(
                "kubernetes.io/legacy-unknown",
                &any,
                &usages(&["client auth"])
            ),
            None
        );
        assert_eq!(
            judge(KUBELET_CLIENT, &any, &usages(&["client auth"])),
            Some(Err("subject organization is not system:nodes".into()))
        );
        let node = request("system:node:n1", &["system:nodes"], 0);
        assert_eq!(
            judge(
                KUBELET_CLIENT,
                &node,
                &usages(&["digital signature", "client auth"])
            ),
            Some(Ok(()))
        );
        assert_eq!(
            judge(KUBELET_CLIENT, &node, &usages(&["client auth"])),
            Some(Err(
                "usages did not match [client auth digital signature key encipherment]".into()
            ))
        );
        assert_eq!(
            judge(
                KUBELET_SERVING,
                &node,
                &usages(&["digital signature", "server auth"])
            ),
            Some(Err("DNS or IP subjectAltName is required".into()))
        );
    }

    #[test]
    fn signs_with_the_request_subject_and_a_capped_lifetime() {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let signer = Signer {
            issuer: Issuer::from_ca_cert_pem(&ca.pem(), ca_key).unwrap(),
            ca_not_after: time::OffsetDateTime::now_utc() + time::Duration::days(30),
            max_duration: Duration::from_secs(365 * 86400),
        };
        let key = KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "dev");
        let csr = params.serialize_request(&key).unwrap().pem().unwrap();
        let pem = signer
            .sign(&csr, &usages(&["client auth"]), Some(3600))
            .unwrap();
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let (_, cert) =
            x509_parser::certificate::X509Certificate::from_der(&block.contents).unwrap();
        let life = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert_eq!(life, 3600 + 300);
        assert_eq!(
            cert.subject()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            "alice"
        );
    }
}
