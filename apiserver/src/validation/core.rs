//! core/v1 kinds (pkg/apis/core/validation): Pod, PodTemplate, ReplicationController,
//! Service, ConfigMap and Secret.

use std::collections::HashSet;

use base64::Engine;
use serde_json::Value;

use super::{
    IMMUTABLE, Obj, config_key_errors, duplicate, forbidden, get_arr, get_i64, get_obj, get_str,
    go_int_or_string, go_quote, invalid, not_supported, objs, pod, port_name_errors,
    port_num_error, required, too_long, validate_dns_label,
};
use crate::error::FieldError;

/// `core.MaxSecretSize`: the total data size of a ConfigMap or Secret.
const MAX_DATA_SIZE: usize = 1024 * 1024;

/// Validates a core/v1 object of kind `kind`.
pub(super) fn validate(kind: &str, obj: &Obj, old: Option<&Obj>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let empty = Obj::new();
    let spec = get_obj(obj, "spec").unwrap_or(&empty);
    match kind {
        "Pod" => pod::pod_spec(&mut errs, spec, "spec"),
        "PodTemplate" => pod::template(&mut errs, get_obj(obj, "template"), "template"),
        "ReplicationController" => super::apps::replication_controller(&mut errs, spec),
        "Service" => service(&mut errs, spec),
        "ConfigMap" => config_map(&mut errs, obj, old),
        "Secret" => secret(&mut errs, obj, old),
        _ => {}
    }
    errs
}

/// `ValidateService`: type, ports (required, numbers, protocols, names, duplicates),
/// node ports, external name, session affinity.
fn service(errs: &mut Vec<FieldError>, spec: &Obj) {
    let ty = get_str(spec, "type");
    let headless = get_str(spec, "clusterIP") == "None";
    let ports = get_arr(spec, "ports");
    if ports.is_empty() && !headless && ty != "ExternalName" {
        errs.push(required("spec.ports", ""));
    }
    if ty == "ExternalName" {
        let name = get_str(spec, "externalName");
        if name.is_empty() {
            errs.push(required("spec.externalName", ""));
        } else {
            for msg in super::dns1123_subdomain_errors(name) {
                errs.push(invalid("spec.externalName", &go_quote(name), &msg));
            }
        }
    }
    let require_name = ports.len() > 1;
    let mut names = HashSet::new();
    for (i, p) in objs(spec, "ports") {
        let pp = format!("spec.ports[{i}]");
        let name = get_str(p, "name");
        if require_name && name.is_empty() {
            errs.push(required(&format!("{pp}.name"), ""));
        } else if !name.is_empty() {
            validate_dns_label(errs, name, &format!("{pp}.name"));
            if !names.insert(name) {
                errs.push(duplicate(&format!("{pp}.name"), &go_quote(name)));
            }
        }
        let port = get_i64(p, "port").unwrap_or(0);
        if let Some(m) = port_num_error(port) {
            errs.push(invalid(&format!("{pp}.port"), &port.to_string(), m));
        }
        let protocol = get_str(p, "protocol");
        if protocol.is_empty() {
            errs.push(required(&format!("{pp}.protocol"), ""));
        } else if !["SCTP", "TCP", "UDP"].contains(&protocol) {
            errs.push(not_supported(
                &format!("{pp}.protocol"),
                &go_quote(protocol),
                &["SCTP", "TCP", "UDP"],
            ));
        }
        let tp = format!("{pp}.targetPort");
        match p.get("targetPort") {
            Some(Value::String(s)) => {
                for m in port_name_errors(s) {
                    errs.push(invalid(&tp, &go_quote(s), m));
                }
            }
            Some(Value::Number(n)) => {
                let n = n.as_i64().unwrap_or(0);
                if let Some(m) = port_num_error(n) {
                    errs.push(invalid(&tp, &n.to_string(), m));
                }
            }
            _ => {}
        }
    }
    match ty {
        "" => errs.push(required("spec.type", "")),
        "ClusterIP" | "ExternalName" | "LoadBalancer" | "NodePort" => {}
        other => errs.push(not_supported(
            "spec.type",
            &go_quote(other),
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        )),
    }
    if ty == "ClusterIP" {
        for (i, p) in objs(spec, "ports") {
            if get_i64(p, "nodePort").unwrap_or(0) != 0 {
                errs.push(forbidden(
                    &format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    // Fields of LoadBalancer Services only (`allocateLoadBalancerNodePorts` is defaulted).
    for field in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
        if ty == "LoadBalancer" {
            if field == "allocateLoadBalancerNodePorts" && spec.get(field).is_none() {
                errs.push(required(&format!("spec.{field}"), ""));
            }
        } else if spec.get(field).is_some_and(|v| !v.is_null()) {
            errs.push(forbidden(
                &format!("spec.{field}"),
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
    }
    let health_check = get_i64(spec, "healthCheckNodePort").unwrap_or(0);
    if health_check != 0
        && !(ty == "LoadBalancer" && get_str(spec, "externalTrafficPolicy") == "Local")
    {
        errs.push(invalid(
            "spec.healthCheckNodePort",
            &health_check.to_string(),
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
    // Duplicate (protocol, port) pairs.
    let mut seen = HashSet::new();
    for (i, p) in objs(spec, "ports") {
        let protocol = get_str(p, "protocol");
        let port = get_i64(p, "port").unwrap_or(0);
        if !seen.insert((protocol, port)) {
            errs.push(duplicate(
                &format!("spec.ports[{i}]"),
                &format!(
                    "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{port}, TargetPort:{}, NodePort:0}}",
                    go_quote(protocol),
                    go_int_or_string(None)
                ),
            ));
        }
    }
    // Duplicate (protocol, nodePort) pairs.
    if ty == "NodePort" || ty == "LoadBalancer" {
        let mut seen = HashSet::new();
        for (i, p) in objs(spec, "ports") {
            let node_port = get_i64(p, "nodePort").unwrap_or(0);
            if node_port != 0 && !seen.insert((get_str(p, "protocol"), node_port)) {
                errs.push(duplicate(
                    &format!("spec.ports[{i}].nodePort"),
                    &node_port.to_string(),
                ));
            }
        }
    }
    match get_str(spec, "sessionAffinity") {
        "" => errs.push(required("spec.sessionAffinity", "")),
        "ClientIP" | "None" => {}
        other => errs.push(not_supported(
            "spec.sessionAffinity",
            &go_quote(other),
            &["ClientIP", "None"],
        )),
    }
}

/// Key checks of a data map (`data`, `binaryData`): `IsConfigMapKey` per key.
fn data_keys(errs: &mut Vec<FieldError>, map: Option<&Obj>, path: &str) {
    for key in map.into_iter().flat_map(|m| m.keys()) {
        for msg in config_key_errors(key) {
            errs.push(invalid(&format!("{path}[{key}]"), &go_quote(key), &msg));
        }
    }
}

/// The decoded length of a base64 data value.
fn decoded_len(v: &Value) -> usize {
    let s = v.as_str().unwrap_or("");
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_or(s.len(), |b| b.len())
}

/// `ValidateConfigMap` (and `ValidateConfigMapUpdate`'s immutability rules).
fn config_map(errs: &mut Vec<FieldError>, obj: &Obj, old: Option<&Obj>) {
    let data = get_obj(obj, "data");
    let binary = get_obj(obj, "binaryData");
    let mut total = 0;
    for (key, value) in data.into_iter().flatten() {
        let p = format!("data[{key}]");
        for msg in config_key_errors(key) {
            errs.push(invalid(&p, &go_quote(key), &msg));
        }
        if binary.is_some_and(|b| b.contains_key(key)) {
            errs.push(invalid(
                &p,
                &go_quote(key),
                "duplicate of key present in binaryData",
            ));
        }
        total += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary.into_iter().flatten() {
        let p = format!("binaryData[{key}]");
        for msg in config_key_errors(key) {
            errs.push(invalid(&p, &go_quote(key), &msg));
        }
        if data.is_some_and(|d| d.contains_key(key)) {
            errs.push(invalid(
                &p,
                &go_quote(key),
                "duplicate of key present in data",
            ));
        }
        total += decoded_len(value);
    }
    if total > MAX_DATA_SIZE {
        errs.push(too_long("", MAX_DATA_SIZE));
    }
    if let Some(old) = old {
        immutable_data(errs, obj, old, &["data", "binaryData"]);
    }
}

/// `ValidateSecret` (and `ValidateSecretUpdate`'s type and immutability rules).
fn secret(errs: &mut Vec<FieldError>, obj: &Obj, old: Option<&Obj>) {
    let data = get_obj(obj, "data");
    data_keys(errs, data, "data");
    // `stringData` is merged into `data` before validation upstream.
    let string_data = get_obj(obj, "stringData");
    if let Some(sd) = string_data {
        let only_new: Obj = sd
            .iter()
            .filter(|(k, _)| !data.is_some_and(|d| d.contains_key(*k)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        data_keys(errs, Some(&only_new), "data");
    }
    let mut total: usize = data
        .into_iter()
        .flatten()
        .map(|(_, v)| decoded_len(v))
        .sum();
    total += string_data
        .into_iter()
        .flatten()
        .map(|(_, v)| v.as_str().map_or(0, str::len))
        .sum::<usize>();
    if total > MAX_DATA_SIZE {
        errs.push(too_long("data", MAX_DATA_SIZE));
    }
    let has = |k: &str| {
        data.is_some_and(|d| d.contains_key(k)) || string_data.is_some_and(|d| d.contains_key(k))
    };
    match get_str(obj, "type") {
        "kubernetes.io/service-account-token" => {
            let annotated = get_obj(obj, "metadata")
                .and_then(|m| get_obj(m, "annotations"))
                .is_some_and(|a| !get_str(a, "kubernetes.io/service-account.name").is_empty());
            if !annotated {
                errs.push(required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => {
            errs.push(required("data[.dockercfg]", ""));
        }
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            errs.push(required("data[.dockerconfigjson]", ""));
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(required("data[username]", ""));
            errs.push(required("data[password]", ""));
        }
        "kubernetes.io/ssh-auth" if !has("ssh-privatekey") => {
            errs.push(required("data[ssh-privatekey]", ""));
        }
        "kubernetes.io/tls" => {
            for k in ["tls.key", "tls.crt"] {
                if !has(k) {
                    errs.push(required(&format!("data[{k}]"), ""));
                }
            }
        }
        _ => {}
    }
    if let Some(old) = old {
        let (t, ot) = (get_str(obj, "type"), get_str(old, "type"));
        if t != ot {
            errs.push(invalid("type", &go_quote(t), IMMUTABLE));
        }
        immutable_data(errs, obj, old, &["data"]);
    }
}

/// The `immutable` rules of ConfigMaps and Secrets on update.
fn immutable_data(errs: &mut Vec<FieldError>, obj: &Obj, old: &Obj, keys: &[&str]) {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
        errs.push(forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for key in keys {
        let norm = |o: &Obj| get_obj(o, key).filter(|m| !m.is_empty()).cloned();
        if norm(obj) != norm(old) {
            errs.push(forbidden(key, "field is immutable when `immutable` is set"));
        }
    }
}
