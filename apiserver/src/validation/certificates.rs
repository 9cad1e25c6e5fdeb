//! certificates.k8s.io/v1 CertificateSigningRequest (pkg/apis/certificates/validation): the
//! request must be a PEM `CERTIFICATE REQUEST` whose signature verifies, usages known and
//! unique, a qualified signerName (never `kubernetes.io/legacy-unknown` through v1),
//! `expirationSeconds` of at least 600, well-formed conditions (Approved and Denied mutually
//! exclusive, those and Failed only `True`, no duplicate types), `status.certificate` only
//! CERTIFICATE blocks. On update: Approved, Denied and Failed conditions are never removed;
//! Approved/Denied change only through `approval`, the certificate only through `status` and
//! only once. Upstream's compatibility allowances for objects that already break a rule are
//! kept (the rule is not enforced when the stored object breaks it too).

use std::collections::HashSet;

use base64::Engine;
use serde_json::Value;
use x509_parser::prelude::FromDer;

use super::{
    Obj, dns1123_label_errors, dns1123_subdomain_errors, duplicate, forbidden, get_arr, get_i64,
    get_obj, get_str, go_quote, invalid, not_supported, objs, required, too_long,
};
use crate::error::FieldError;

/// The legacy signer, refused through v1.
pub const LEGACY_UNKNOWN_SIGNER: &str = "kubernetes.io/legacy-unknown";

/// Every key usage upstream knows, sorted as `sets.String.List()` prints them.
const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// Condition types whose status may only be `True`.
const TRUE_ONLY: &[&str] = &["Approved", "Denied", "Failed"];

/// What an update path may change (upstream's `certificateValidationOptions`).
#[derive(Debug, Clone, Copy, Default)]
struct Options {
    allow_setting_approval_conditions: bool,
    allow_setting_certificate: bool,
    allow_both_approved_and_denied: bool,
    allow_legacy_signer_name: bool,
    allow_duplicate_condition_types: bool,
    allow_empty_condition_type: bool,
    allow_arbitrary_certificate: bool,
    allow_unknown_usages: bool,
    allow_duplicate_usages: bool,
}

/// Validates a CertificateSigningRequest; on update `old` is the stored object and
/// `subresource` the path it came through (`""`, `status` or `approval`).
pub(super) fn validate(obj: &Obj, old: Option<&Obj>, subresource: &str) -> Vec<FieldError> {
    let mut opts = options(obj, old);
    match subresource {
        "approval" => opts.allow_setting_approval_conditions = true,
        "status" => opts.allow_setting_certificate = true,
        _ => {}
    }
    let mut errs = csr(obj, opts);
    if let Some(old) = old {
        update(&mut errs, obj, old, opts);
    }
    errs
}

fn options(new: &Obj, old: Option<&Obj>) -> Options {
    let Some(old) = old else {
        return Options::default();
    };
    let types: Vec<&str> = conditions(old).map(|c| get_str(c, "type")).collect();
    let usages: Vec<&str> = usages(old);
    Options {
        allow_both_approved_and_denied: types.contains(&"Approved") && types.contains(&"Denied"),
        allow_legacy_signer_name: signer(old) == LEGACY_UNKNOWN_SIGNER,
        allow_duplicate_condition_types: types.len() != types.iter().collect::<HashSet<_>>().len(),
        allow_empty_condition_type: types.contains(&""),
        allow_arbitrary_certificate: certificate(new) == certificate(old)
            || certificate_error(&certificate(old)).is_some(),
        allow_unknown_usages: usages.iter().any(|u| !USAGES.contains(u)),
        allow_duplicate_usages: usages.len() != usages.iter().collect::<HashSet<_>>().len(),
        ..Options::default()
    }
}

fn spec(obj: &Obj) -> Option<&Obj> {
    get_obj(obj, "spec")
}

fn signer(obj: &Obj) -> &str {
    spec(obj).map_or("", |s| get_str(s, "signerName"))
}

fn usages(obj: &Obj) -> Vec<&str> {
    spec(obj)
        .map(|s| get_arr(s, "usages"))
        .unwrap_or_default()
        .iter()
        .map(|u| u.as_str().unwrap_or(""))
        .collect()
}

fn conditions(obj: &Obj) -> impl Iterator<Item = &Obj> {
    get_obj(obj, "status")
        .into_iter()
        .flat_map(|s| objs(s, "conditions").map(|(_, c)| c))
}

/// `status.certificate` decoded from base64 (empty when absent or not base64).
fn certificate(obj: &Obj) -> Vec<u8> {
    let text = get_obj(obj, "status").map_or("", |s| get_str(s, "certificate"));
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_default()
}

/// `validateCertificateSigningRequest`.
fn csr(obj: &Obj, opts: Options) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let empty = Obj::new();
    let spec = spec(obj).unwrap_or(&empty);
    let request = base64::engine::general_purpose::STANDARD
        .decode(get_str(spec, "request"))
        .unwrap_or_default();
    if let Err(why) = parse_request(&request) {
        errs.push(invalid("spec.request", &go_bytes(&request), &why));
    }
    let usages = get_arr(spec, "usages");
    if usages.is_empty() {
        errs.push(required("spec.usages", ""));
    }
    if !opts.allow_unknown_usages {
        for (i, u) in usages.iter().enumerate() {
            let u = u.as_str().unwrap_or("");
            if !USAGES.contains(&u) {
                errs.push(not_supported(
                    &format!("spec.usages[{i}]"),
                    &go_quote(u),
                    USAGES,
                ));
            }
        }
    }
    if !opts.allow_duplicate_usages {
        let mut seen = HashSet::new();
        for (i, u) in usages.iter().enumerate() {
            let u = u.as_str().unwrap_or("");
            if !seen.insert(u) {
                errs.push(duplicate(&format!("spec.usages[{i}]"), &go_quote(u)));
            }
        }
    }
    let signer = get_str(spec, "signerName");
    if !opts.allow_legacy_signer_name && signer == LEGACY_UNKNOWN_SIGNER {
        errs.push(invalid(
            "spec.signerName",
            &go_quote(signer),
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        signer_name(&mut errs, signer, "spec.signerName");
    }
    if let Some(secs) = get_i64(spec, "expirationSeconds")
        && secs < 600
    {
        errs.push(invalid(
            "spec.expirationSeconds",
            &secs.to_string(),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    condition_errors(&mut errs, obj, opts);
    if !opts.allow_arbitrary_certificate
        && let Some(why) = certificate_error(&certificate(obj))
    {
        errs.push(invalid(
            "status.certificate",
            &go_quote("<certificate data>"),
            &why,
        ));
    }
    errs
}

/// `validateConditions`.
fn condition_errors(errs: &mut Vec<FieldError>, obj: &Obj, opts: Options) {
    let (mut approved, mut denied) = (false, false);
    let mut seen = HashSet::new();
    for (i, c) in conditions(obj).enumerate() {
        let path = format!("status.conditions[{i}]");
        let ty = get_str(c, "type");
        if !opts.allow_empty_condition_type && ty.is_empty() {
            errs.push(required(&format!("{path}.type"), ""));
        }
        let allowed: &[&str] = if TRUE_ONLY.contains(&ty) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        let status = get_str(c, "status");
        if status.is_empty() {
            errs.push(required(&format!("{path}.status"), ""));
        } else if !allowed.contains(&status) {
            errs.push(not_supported(
                &format!("{path}.status"),
                &go_quote(status),
                allowed,
            ));
        }
        if !opts.allow_both_approved_and_denied {
            let clash = match ty {
                "Approved" => {
                    approved = true;
                    denied
                }
                "Denied" => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                errs.push(invalid(
                    &format!("{path}.type"),
                    &go_quote(ty),
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !opts.allow_duplicate_condition_types && !seen.insert(ty) {
            errs.push(duplicate(&format!("{path}.type"), &go_quote(ty)));
        }
    }
}

/// `validateCertificateSigningRequestUpdate`'s rules on what changed.
fn update(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj, opts: Options) {
    let of_type = |obj: &Obj, ty: &str| -> Vec<Obj> {
        conditions(obj)
            .filter(|c| get_str(c, "type") == ty)
            .cloned()
            .collect()
    };
    for ty in ["Approved", "Denied", "Failed"] {
        if of_type(new, ty).len() < of_type(old, ty).len() {
            errs.push(forbidden(
                "status.conditions",
                &format!(
                    "updates may not remove a condition of type {}",
                    go_quote(ty)
                ),
            ));
        }
    }
    if !opts.allow_setting_approval_conditions {
        for ty in ["Approved", "Denied"] {
            let (n, o) = (of_type(new, ty), of_type(old, ty));
            if n.len() > o.len() {
                errs.push(forbidden(
                    "status.conditions",
                    &format!("updates may not add a condition of type {}", go_quote(ty)),
                ));
            } else if n.len() == o.len() && n != o {
                errs.push(forbidden(
                    "status.conditions",
                    &format!(
                        "updates may not modify a condition of type {}",
                        go_quote(ty)
                    ),
                ));
            }
        }
    }
    let (new_cert, old_cert) = (certificate(new), certificate(old));
    if new_cert != old_cert {
        if !opts.allow_setting_certificate {
            errs.push(forbidden(
                "status.certificate",
                "updates may not set certificate content",
            ));
        } else if !old_cert.is_empty() {
            errs.push(forbidden(
                "status.certificate",
                "updates may not modify existing certificate content",
            ));
        }
    }
}

/// `ValidateSignerName`: `<domain>/<path>`, the domain of DNS-1123 labels with at least two
/// of them, the path of DNS-1123 subdomains.
fn signer_name(errs: &mut Vec<FieldError>, name: &str, path: &str) {
    if name.is_empty() {
        errs.push(required(path, ""));
        return;
    }
    let segments: Vec<&str> = name.split('/').collect();
    let [domain, rest] = segments[..] else {
        errs.push(invalid(
            path,
            &go_quote(name),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return;
    };
    if domain.len() > 253 {
        errs.push(too_long(path, 253));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    for label in &labels {
        let problems = dns1123_label_errors(label);
        if !problems.is_empty() {
            for p in problems {
                errs.push(invalid(
                    path,
                    &go_quote(domain),
                    &format!("validating label {}: {p}", go_quote(label)),
                ));
            }
            break;
        }
    }
    if labels.len() < 2 {
        errs.push(invalid(
            path,
            &go_quote(domain),
            "should be a domain with at least two segments separated by dots",
        ));
    }
    // Upstream's limit on the path: 571 characters (so the whole name fits 253+1+571).
    if rest.len() > 571 {
        errs.push(too_long(path, 571));
    }
    for component in rest.split('.') {
        for p in dns1123_subdomain_errors(component) {
            errs.push(invalid(
                path,
                &go_quote(rest),
                &format!("validating component {}: {p}", go_quote(component)),
            ));
        }
    }
}

/// Upstream's `ParseCSR` and `CheckSignature`: the first PEM block must be a
/// `CERTIFICATE REQUEST` that parses and whose signature verifies with its own key.
pub fn parse_request(pem: &[u8]) -> Result<(), String> {
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(pem) else {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    };
    if block.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let Ok((_, req)) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
    else {
        return Err("x509: malformed certificate request".into());
    };
    if req.verify_signature().is_err() {
        let algorithm = req
            .certification_request_info
            .subject_pki
            .algorithm
            .algorithm
            .to_id_string();
        return Err(match algorithm.as_str() {
            "1.2.840.10045.2.1" => "x509: ECDSA verification failure".into(),
            "1.3.101.112" => "x509: Ed25519 verification failure".into(),
            _ => "crypto/rsa: verification error".into(),
        });
    }
    Ok(())
}

/// Upstream's `validateCertificate`: empty, or only CERTIFICATE blocks, each holding a
/// certificate (a block with headers does not decode, as Go's decoder stops there).
fn certificate_error(pem: &[u8]) -> Option<String> {
    if pem.is_empty() {
        return None;
    }
    let mut blocks = 0;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let Ok(block) = block else {
            break;
        };
        if block.label != "CERTIFICATE" {
            return Some(format!(
                "only CERTIFICATE PEM blocks are allowed, found {}",
                go_quote(&block.label)
            ));
        }
        blocks += 1;
        if x509_parser::certificate::X509Certificate::from_der(&block.contents).is_err() {
            return Some("x509: malformed certificate".into());
        }
    }
    (blocks == 0).then(|| "must contain at least one CERTIFICATE PEM block".into())
}

/// Go's `%#v` of a `[]byte`: `[]byte{0x2d, 0x2d}` (`[]byte(nil)` when empty).
fn go_bytes(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "[]byte(nil)".into();
    }
    let parts: Vec<String> = bytes.iter().map(|b| format!("0x{b:x}")).collect();
    format!("[]byte{{{}}}", parts.join(", "))
}

/// The bytes of a JSON string field that holds base64 (for callers outside validation).
pub fn decoded_field(v: Option<&Value>) -> Vec<u8> {
    v.and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Obj {
        match v {
            Value::Object(m) => m,
            _ => Obj::new(),
        }
    }

    fn fields(errs: &[FieldError]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn bad_requests_and_legacy_signer_are_refused() {
        let csr = obj(json!({"metadata": {"name": "x"}, "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode("junk"),
            "signerName": LEGACY_UNKNOWN_SIGNER, "usages": ["client auth", "bogus", "client auth"],
            "expirationSeconds": 60}}));
        let errs = fields(&validate(&csr, None, ""));
        assert!(errs[0].starts_with("spec.request: Invalid value: []byte{0x6a, 0x75, 0x6e, 0x6b}: PEM block type must be CERTIFICATE REQUEST"), "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.usages[1]: Unsupported value: \"bogus\""))
        );
        assert!(
            errs.iter()
                .any(|e| e == "spec.usages[2]: Duplicate value: \"client auth\"")
        );
        assert!(errs.iter().any(|e| e == "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"));
        assert!(errs.iter().any(|e| e == "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)"));
    }

    #[test]
    fn approval_rules() {
        let base = json!({"metadata": {"name": "x"}, "spec": {"signerName": "example.com/s", "usages": ["client auth"]}});
        let with = |conds: Value| {
            let mut o = base.clone();
            o["status"] = json!({ "conditions": conds });
            obj(o)
        };
        let old = with(json!([{"type": "Approved", "status": "True"}]));
        let both = with(
            json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]),
        );
        let errs = fields(&validate(&both, Some(&old), "approval"));
        assert!(errs.iter().any(|e| e == "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive"), "{errs:?}");
        let none = with(json!([]));
        let errs = fields(&validate(&none, Some(&old), "approval"));
        assert!(errs.iter().any(|e| e == "status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""), "{errs:?}");
        let errs = fields(&validate(&old, Some(&none), "status"));
        assert!(errs.iter().any(|e| e == "status.conditions: Forbidden: updates may not add a condition of type \"Approved\""), "{errs:?}");
        let failed = with(json!([{"type": "Failed", "status": "False"}]));
        let errs = fields(&validate(&failed, Some(&none), "status"));
        assert!(errs.iter().any(|e| e == "status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\""), "{errs:?}");
    }

    #[test]
    fn signer_names_are_qualified() {
        let mut errs = Vec::new();
        signer_name(&mut errs, "nodomain", "p");
        signer_name(&mut errs, "local/x", "p");
        let errs = fields(&errs);
        assert_eq!(
            errs[0],
            "p: Invalid value: \"nodomain\": must be a fully qualified domain and path of the form 'example.com/signer-name'"
        );
        assert_eq!(
            errs[1],
            "p: Invalid value: \"local\": should be a domain with at least two segments separated by dots"
        );
    }
}
