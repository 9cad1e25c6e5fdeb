//! What a `pods/status` write may change, as kube-apiserver v1.33's `ValidatePodStatusUpdate`
//! checks it (pkg/apis/core/validation), and what upstream's pod status strategy and the v1 →
//! internal conversion do to the new status first (`prepare`).
//!
//! The spec of a status write is the stored one (the handler puts it back), so the checks are on
//! the status: custom condition types are qualified names, `nominatedNodeName` a DNS
//! subdomain, `qosClass` immutable, terminated containers stay terminated unless the restart
//! policy lets them restart, resource claim statuses name the spec's claims, and the pod and host
//! IPs are valid, unique and at most one per family.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use serde_json::{Map, Value, json};

use super::{
    IMMUTABLE, Obj, dns1123_subdomain_errors, duplicate, forbidden, get_arr, get_obj, get_str,
    go_quote, invalid, objs, qualified_name_errors,
};
use crate::error::FieldError;

/// Conditions the kubelet owns, whose type is not checked (`validatePodConditions`).
const SYSTEM_CONDITIONS: &[&str] = &["PodScheduled", "Ready", "Initialized"];

/// Upstream's status strategy and conversion on the new status of a `pods/status` write, before
/// validation: an empty `qosClass` keeps the stored one (old kubelets dropped it), and `podIP`
/// is authoritative over `podIPs` (`podIPs` becomes `[podIP]` when it is empty or starts
/// elsewhere; `podIP` becomes `podIPs[0]` when empty), likewise `hostIP` over `hostIPs`.
pub fn prepare(new: &mut Map<String, Value>, old: &Map<String, Value>) {
    let old_qos = get_obj(old, "status")
        .map(|s| get_str(s, "qosClass").to_owned())
        .unwrap_or_default();
    let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    if get_str(status, "qosClass").is_empty() && !old_qos.is_empty() {
        status.insert("qosClass".into(), json!(old_qos));
    }
    let pod_ips = effective_ips(status, "podIP", "podIPs");
    if !pod_ips.is_empty() {
        status.insert("podIP".into(), json!(pod_ips[0]));
        status.insert("podIPs".into(), ip_list(&pod_ips));
    }
    let host_ip = get_str(status, "hostIP");
    if !host_ip.is_empty() {
        let host_ips = effective_ips(status, "hostIP", "hostIPs");
        status.insert("hostIPs".into(), ip_list(&host_ips));
    }
}

/// The pod's QoS class as kube-apiserver sets it on create (`qos.ComputePodQOS`): from the
/// cpu and memory requests and limits of its containers and init containers (a missing request
/// taking its limit, as defaulting does): none → `BestEffort`; limits for both on every
/// container, with the summed requests equal to the summed limits → `Guaranteed`; else
/// `Burstable`.
pub fn qos_class(pod: &Map<String, Value>) -> &'static str {
    let empty = Obj::new();
    let spec = get_obj(pod, "spec").unwrap_or(&empty);
    let mut requests: Vec<(&str, f64)> = Vec::new();
    let mut limits: Vec<(&str, f64)> = Vec::new();
    let add = |sums: &mut Vec<(&'static str, f64)>, name: &'static str, v: f64| match sums
        .iter_mut()
        .find(|(n, _)| *n == name)
    {
        Some((_, sum)) => *sum += v,
        None => sums.push((name, v)),
    };
    let quantity = |m: Option<&Obj>, name: &str| {
        m.and_then(|m| m.get(name))
            .and_then(|q| super::parse_quantity(&super::quantity_text(q)))
            .filter(|v| *v > 0.0)
    };
    let mut guaranteed = true;
    let containers = objs(spec, "containers").chain(objs(spec, "initContainers"));
    for (_, c) in containers {
        let res = get_obj(c, "resources");
        let req = res.and_then(|r| get_obj(r, "requests"));
        let lim = res.and_then(|r| get_obj(r, "limits"));
        let mut limits_found = 0;
        for name in ["cpu", "memory"] {
            let limit = quantity(lim, name);
            let request = if req.is_some_and(|r| r.contains_key(name)) {
                quantity(req, name)
            } else {
                limit
            };
            if let Some(v) = request {
                add(&mut requests, name, v);
            }
            if let Some(v) = limit {
                add(&mut limits, name, v);
                limits_found += 1;
            }
        }
        if limits_found < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed {
        guaranteed = requests.iter().all(|(name, v)| {
            limits
                .iter()
                .any(|(n, l)| n == name && (l - v).abs() <= f64::EPSILON * l.abs().max(1.0))
        });
    }
    if guaranteed && requests.len() == limits.len() {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// `[{"ip": …}, …]`.
fn ip_list(ips: &[String]) -> Value {
    Value::Array(ips.iter().map(|ip| json!({ "ip": ip })).collect())
}

/// The IP list as the v1 → internal conversion makes it: `[single]` when `single` is set and
/// the list is empty or starts with another address, else the list's `ip`s.
fn effective_ips(status: &Obj, single: &str, list: &str) -> Vec<String> {
    let one = get_str(status, single);
    let ips: Vec<String> = get_arr(status, list)
        .iter()
        .map(|v| v.get("ip").and_then(Value::as_str).unwrap_or("").to_owned())
        .collect();
    if !one.is_empty() && ips.first().is_none_or(|first| first != one) {
        vec![one.to_owned()]
    } else {
        ips
    }
}

/// `ValidatePodStatusUpdate` of `new` against the stored `old`.
pub(super) fn update(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) {
    let empty = Obj::new();
    let status = get_obj(new, "status").unwrap_or(&empty);
    let old_status = get_obj(old, "status").unwrap_or(&empty);
    let old_spec = get_obj(old, "spec").unwrap_or(&empty);
    let spec = get_obj(new, "spec").unwrap_or(&empty);

    // Upstream passes `metadata` as the conditions' parent path.
    for (i, c) in objs(status, "conditions") {
        let kind = get_str(c, "type");
        if SYSTEM_CONDITIONS.contains(&kind) {
            continue;
        }
        for m in qualified_name_errors(kind) {
            errs.push(invalid(
                &format!("metadata.conditions[{i}].Type"),
                &go_quote(kind),
                &m,
            ));
        }
    }
    let nominated = get_str(status, "nominatedNodeName");
    if nominated != get_str(old_status, "nominatedNodeName") && !nominated.is_empty() {
        for m in dns1123_subdomain_errors(nominated) {
            errs.push(invalid(
                "status.nominatedNodeName",
                &go_quote(nominated),
                &m,
            ));
        }
    }
    let qos = get_str(status, "qosClass");
    if qos != get_str(old_status, "qosClass") {
        errs.push(invalid("status.qosClass", &go_quote(qos), IMMUTABLE));
    }

    let restart = get_str(old_spec, "restartPolicy");
    let restartable_init: HashSet<&str> = objs(old_spec, "initContainers")
        .filter(|(_, c)| get_str(c, "restartPolicy") == "Always")
        .map(|(_, c)| get_str(c, "name"))
        .collect();
    state_transitions(
        errs,
        status,
        old_status,
        "containerStatuses",
        restart,
        &HashSet::new(),
    );
    state_transitions(
        errs,
        status,
        old_status,
        "initContainerStatuses",
        restart,
        &restartable_init,
    );
    // The kubelet never restarts ephemeral containers: an implicit `Never`.
    state_transitions(
        errs,
        status,
        old_status,
        "ephemeralContainerStatuses",
        "Never",
        &HashSet::new(),
    );
    resource_claim_statuses(errs, status, spec);
    pod_ips(errs, status);
    host_ips(errs, status);
}

/// Whether a container status's `state.terminated` is set.
fn terminated(c: &Obj) -> Option<&Obj> {
    get_obj(c, "state").and_then(|s| get_obj(s, "terminated"))
}

/// `ValidateContainerStateTransition` / `ValidateInitContainerStateTransition`: unless the
/// restart policy is `Always`, a terminated container (one that succeeded, with `OnFailure`;
/// not a restartable init container) may not go back to a non-terminated state. The index is
/// the old status's.
fn state_transitions(
    errs: &mut Vec<FieldError>,
    status: &Obj,
    old_status: &Obj,
    key: &str,
    restart: &str,
    restartable: &HashSet<&str>,
) {
    if restart == "Always" {
        return;
    }
    for (i, old) in objs(old_status, key) {
        let Some(done) = terminated(old) else {
            continue;
        };
        let failed = done.get("exitCode").and_then(Value::as_i64).unwrap_or(0) != 0;
        if failed && restart == "OnFailure" {
            continue;
        }
        let name = get_str(old, "name");
        if restartable.contains(name) {
            continue;
        }
        for (_, new) in objs(status, key) {
            if get_str(new, "name") == name && terminated(new).is_none() {
                errs.push(forbidden(
                    &format!("status.{key}[{i}].state"),
                    "may not be transitioned to non-terminated state",
                ));
            }
        }
    }
}

/// `validatePodResourceClaimStatuses`: each names one of the spec's claims, once, and its
/// `resourceClaimName` is a DNS subdomain.
fn resource_claim_statuses(errs: &mut Vec<FieldError>, status: &Obj, spec: &Obj) {
    let claims: HashSet<&str> = objs(spec, "resourceClaims")
        .map(|(_, c)| get_str(c, "name"))
        .collect();
    let mut seen = HashSet::new();
    for (i, s) in objs(status, "resourceClaimStatuses") {
        let p = format!("status.resourceClaimStatuses[{i}].name");
        let name = get_str(s, "name");
        if !claims.contains(name) {
            errs.push(invalid(
                &p,
                &go_quote(name),
                "must match the name of an entry in `spec.resourceClaims`",
            ));
        }
        if !seen.insert(name) {
            errs.push(duplicate(&p, &go_quote(name)));
        }
        if let Some(claim) = s.get("resourceClaimName").and_then(Value::as_str) {
            for m in dns1123_subdomain_errors(claim) {
                errs.push(invalid(&p, &go_quote(claim), &m));
            }
        }
    }
}

/// Go's `netutils.ParseIPSloppy`: IPv4 (leading zeros allowed) or IPv6.
fn parse_ip(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (o, p) in octets.iter_mut().zip(&parts) {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *o = p.parse().ok()?;
    }
    Some(IpAddr::V4(Ipv4Addr::from(octets)))
}

/// Whether the address is IPv4 as Go's `To4` sees it (IPv4-mapped IPv6 included).
fn is_v4(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => true,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
    }
}

/// `IsValidIP`'s detail.
const INVALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// Whether the (parsable) addresses are one IPv4 and one IPv6 (`IsDualStackIPStrings`).
fn dual_stack(ips: &[String]) -> bool {
    let parsed: Option<Vec<IpAddr>> = ips.iter().map(|s| parse_ip(s)).collect();
    parsed.is_some_and(|p| p.iter().any(is_v4) && p.iter().any(|ip| !is_v4(ip)))
}

/// Go's `%#v` of a `[]core.<kind>` of IPs.
fn go_ip_slice(kind: &str, ips: &[String]) -> String {
    let items: Vec<String> = ips
        .iter()
        .map(|ip| format!("core.{kind}{{IP:{}}}", go_quote(ip)))
        .collect();
    format!("[]core.{kind}{{{}}}", items.join(", "))
}

/// `validatePodIPs`: each a valid IP; more than one only as one per family, no duplicates.
fn pod_ips(errs: &mut Vec<FieldError>, status: &Obj) {
    let ips = effective_ips(status, "podIP", "podIPs");
    for (i, ip) in ips.iter().enumerate() {
        if parse_ip(ip).is_none() {
            errs.push(invalid(
                &format!("status.podIPs[{i}]"),
                &go_quote(ip),
                INVALID_IP,
            ));
        }
    }
    if ips.len() > 1 {
        if !dual_stack(&ips) || ips.len() > 2 {
            errs.push(invalid(
                "status.podIPs",
                &go_ip_slice("PodIP", &ips),
                "may specify no more than one IP for each IP family",
            ));
        }
        let mut seen = HashSet::new();
        for (i, ip) in ips.iter().enumerate() {
            if !seen.insert(ip) {
                errs.push(duplicate(
                    &format!("status.podIPs[{i}]"),
                    &format!("core.PodIP{{IP:{}}}", go_quote(ip)),
                ));
            }
        }
    }
}

/// `validateHostIPs`: the first equals `hostIP`, each a valid IP, no duplicates, at most one
/// per family.
fn host_ips(errs: &mut Vec<FieldError>, status: &Obj) {
    let ips = effective_ips(status, "hostIP", "hostIPs");
    let Some(first) = ips.first() else {
        return;
    };
    if get_str(status, "hostIP") != first {
        errs.push(invalid(
            "status.hostIPs[0].ip",
            &go_quote(first),
            "must be equal to `hostIP`",
        ));
    }
    for (i, ip) in ips.iter().enumerate() {
        if parse_ip(ip).is_none() {
            errs.push(invalid(
                &format!("status.hostIPs[{i}]"),
                &go_quote(ip),
                INVALID_IP,
            ));
        }
    }
    if ips.len() > 1 {
        let mut seen = HashSet::new();
        for (i, ip) in ips.iter().enumerate() {
            if !seen.insert(ip) {
                errs.push(duplicate(
                    &format!("status.hostIPs[{i}]"),
                    &format!("core.HostIP{{IP:{}}}", go_quote(ip)),
                ));
            }
        }
        if !dual_stack(&ips) || ips.len() > 2 {
            errs.push(invalid(
                "status.hostIPs",
                &go_ip_slice("HostIP", &ips),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Obj {
        match v {
            Value::Object(m) => m,
            _ => Obj::new(),
        }
    }

    /// A pod with `restartPolicy` and the given status.
    fn pod(restart: &str, status: &Value) -> Obj {
        obj(json!({
            "metadata": { "name": "p" },
            "spec": {
                "restartPolicy": restart,
                "containers": [{ "name": "app", "image": "nginx" }],
                "initContainers": [
                    { "name": "init", "image": "busybox" },
                    { "name": "sidecar", "image": "busybox", "restartPolicy": "Always" }
                ],
                "resourceClaims": [{ "name": "gpu" }]
            },
            "status": status.clone(),
        }))
    }

    fn check(new: &Obj, old: &Obj) -> Vec<String> {
        let mut errs = Vec::new();
        update(&mut errs, new, old);
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    fn running(name: &str) -> Value {
        json!({ "name": name, "state": { "running": { "startedAt": "2026-01-01T00:00:00Z" } } })
    }

    fn exited(name: &str, code: i64) -> Value {
        json!({ "name": name, "state": { "terminated": { "exitCode": code } } })
    }

    #[test]
    fn the_qos_class_is_computed_from_requests_and_limits() {
        let with = |resources: Value| {
            obj(
                json!({ "spec": { "containers": [{ "name": "a", "image": "x", "resources": resources }] } }),
            )
        };
        assert_eq!(qos_class(&with(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&with(
                json!({ "limits": { "cpu": "100m", "memory": "64Mi" } })
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&with(
                json!({ "requests": { "cpu": "0.1", "memory": "64Mi" },
                                     "limits": { "cpu": "100m", "memory": "64Mi" } })
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&with(
                json!({ "requests": { "cpu": "50m" }, "limits": { "cpu": "100m", "memory": "64Mi" } })
            )),
            "Burstable"
        );
        assert_eq!(
            qos_class(&with(json!({ "requests": { "memory": "64Mi" } }))),
            "Burstable"
        );
    }

    #[test]
    fn an_unchanged_status_is_accepted() {
        let p = pod(
            "Never",
            &json!({ "qosClass": "BestEffort", "podIP": "10.0.0.1", "podIPs": [{ "ip": "10.0.0.1" }],
                    "hostIP": "192.168.0.1", "hostIPs": [{ "ip": "192.168.0.1" }],
                    "conditions": [{ "type": "Ready", "status": "True" }],
                    "containerStatuses": [exited("app", 0)] }),
        );
        assert!(check(&p, &p).is_empty());
    }

    #[test]
    fn custom_condition_types_are_qualified_names() {
        let old = pod("Always", &json!({}));
        let new = pod(
            "Always",
            &json!({ "conditions": [{ "type": "Ready" }, { "type": "bad type!" }, { "type": "example.com/Fine" }] }),
        );
        assert_eq!(
            check(&new, &old),
            vec![
                "metadata.conditions[1].Type: Invalid value: \"bad type!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
    }

    #[test]
    fn a_new_nominated_node_name_is_a_dns_subdomain() {
        let old = pod("Always", &json!({}));
        let new = pod("Always", &json!({ "nominatedNodeName": "Node_1" }));
        assert_eq!(
            check(&new, &old),
            vec![
                "status.nominatedNodeName: Invalid value: \"Node_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        let fine = pod("Always", &json!({ "nominatedNodeName": "node-1" }));
        assert!(check(&fine, &old).is_empty());
    }

    #[test]
    fn the_qos_class_is_immutable() {
        let old = pod("Always", &json!({ "qosClass": "BestEffort" }));
        let new = pod("Always", &json!({ "qosClass": "Guaranteed" }));
        assert_eq!(
            check(&new, &old),
            vec!["status.qosClass: Invalid value: \"Guaranteed\": field is immutable"]
        );
    }

    #[test]
    fn prepare_keeps_the_stored_qos_class_when_the_new_status_has_none() {
        let old = pod("Always", &json!({ "qosClass": "Burstable" }));
        let mut new = pod("Always", &json!({ "phase": "Running" }));
        prepare(&mut new, &old);
        assert_eq!(new["status"]["qosClass"], "Burstable");
        assert!(check(&new, &old).is_empty());
    }

    #[test]
    fn terminated_containers_stay_terminated_unless_the_policy_restarts_them() {
        let old = pod(
            "OnFailure",
            &json!({ "containerStatuses": [exited("app", 0)],
                    "initContainerStatuses": [exited("init", 0), exited("sidecar", 0)],
                    "ephemeralContainerStatuses": [exited("debug", 1)] }),
        );
        let new = pod(
            "OnFailure",
            &json!({ "containerStatuses": [running("app")],
                    "initContainerStatuses": [running("init"), running("sidecar")],
                    "ephemeralContainerStatuses": [running("debug")] }),
        );
        assert_eq!(
            check(&new, &old),
            vec![
                "status.containerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state",
                "status.initContainerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state",
                "status.ephemeralContainerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state",
            ]
        );
        // A failed container may restart with OnFailure; anything may with Always.
        let failed = pod(
            "OnFailure",
            &json!({ "containerStatuses": [exited("app", 2)] }),
        );
        let again = pod(
            "OnFailure",
            &json!({ "containerStatuses": [running("app")] }),
        );
        assert!(check(&again, &failed).is_empty());
        let always_old = pod(
            "Always",
            &json!({ "containerStatuses": [exited("app", 0)] }),
        );
        let always_new = pod("Always", &json!({ "containerStatuses": [running("app")] }));
        assert!(check(&always_new, &always_old).is_empty());
    }

    #[test]
    fn resource_claim_statuses_name_the_specs_claims_once() {
        let old = pod("Always", &json!({}));
        let new = pod(
            "Always",
            &json!({ "resourceClaimStatuses": [{ "name": "gpu" }, { "name": "gpu" }, { "name": "tpu" }] }),
        );
        assert_eq!(
            check(&new, &old),
            vec![
                "status.resourceClaimStatuses[1].name: Duplicate value: \"gpu\"",
                "status.resourceClaimStatuses[2].name: Invalid value: \"tpu\": must match the name of an entry in `spec.resourceClaims`",
            ]
        );
    }

    #[test]
    fn pod_ips_are_valid_unique_and_one_per_family() {
        let old = pod("Always", &json!({}));
        let bad = pod("Always", &json!({ "podIPs": [{ "ip": "10.0.0.300" }] }));
        assert_eq!(
            check(&bad, &old),
            vec![
                "status.podIPs[0]: Invalid value: \"10.0.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            ]
        );
        let twice = pod(
            "Always",
            &json!({ "podIP": "10.0.0.1", "podIPs": [{ "ip": "10.0.0.1" }, { "ip": "10.0.0.1" }] }),
        );
        assert_eq!(
            check(&twice, &old),
            vec![
                "status.podIPs: Invalid value: []core.PodIP{core.PodIP{IP:\"10.0.0.1\"}, core.PodIP{IP:\"10.0.0.1\"}}: may specify no more than one IP for each IP family",
                "status.podIPs[1]: Duplicate value: core.PodIP{IP:\"10.0.0.1\"}",
            ]
        );
        let dual = pod(
            "Always",
            &json!({ "podIP": "10.0.0.1", "podIPs": [{ "ip": "10.0.0.1" }, { "ip": "fd00::1" }] }),
        );
        assert!(check(&dual, &old).is_empty());
        // podIP is authoritative: a list that starts elsewhere is replaced by it.
        let mut other = pod(
            "Always",
            &json!({ "podIP": "10.0.0.2", "podIPs": [{ "ip": "10.0.0.1" }] }),
        );
        assert!(check(&other, &old).is_empty());
        prepare(&mut other, &old);
        assert_eq!(other["status"]["podIPs"], json!([{ "ip": "10.0.0.2" }]));
    }

    #[test]
    fn host_ips_start_with_the_host_ip() {
        let old = pod("Always", &json!({}));
        let new = pod("Always", &json!({ "hostIPs": [{ "ip": "192.168.0.1" }] }));
        assert_eq!(
            check(&new, &old),
            vec!["status.hostIPs[0].ip: Invalid value: \"192.168.0.1\": must be equal to `hostIP`"]
        );
        let two = pod(
            "Always",
            &json!({ "hostIP": "192.168.0.1", "hostIPs": [{ "ip": "192.168.0.1" }, { "ip": "192.168.0.2" }] }),
        );
        assert_eq!(
            check(&two, &old),
            vec![
                "status.hostIPs: Invalid value: []core.HostIP{core.HostIP{IP:\"192.168.0.1\"}, core.HostIP{IP:\"192.168.0.2\"}}: may specify no more than one IP for each IP family"
            ]
        );
    }
}
