//! Services: cluster IPs from `--service-cluster-ip-range` (default 10.96.0.0/12) and node
//! ports from 30000-32767, each reserved by a create-if-absent key in the store, so two
//! services can never hold the same IP or port, even when created concurrently.
//!
//! Keys: `/registry/core/serviceips/<ip>` and `/registry/core/servicenodeports/<port>`.
//!
//! Updates follow upstream's strategy and allocator: fields that only mean something for the
//! old type and that the client left as they were are dropped when the type changes
//! (`drop_type_dependent_fields`: node ports, `healthCheckNodePort`,
//! `allocateLoadBalancerNodePorts`, `loadBalancerClass`, `externalTrafficPolicy`, the
//! cluster IP for ExternalName, and `status.loadBalancer` once it is no LoadBalancer);
//! `allocate_update` then reserves what the new type needs (node ports for a NodePort
//! Service or a LoadBalancer with `allocateLoadBalancerNodePorts` unset or true, a cluster IP
//! after ExternalName) and, once the write is stored, `settle` releases what the old object
//! held and the new one does not.

use std::collections::HashSet;

use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

use super::Ctx;
use crate::error::{ApiError, FieldError, Result};
use crate::storage;

/// The service IP range (network address and prefix length).
#[derive(Debug, Clone, Copy)]
pub struct ServiceRange {
    network: u32,
    size: u32,
}

impl Default for ServiceRange {
    fn default() -> Self {
        ServiceRange {
            network: u32::from(Ipv4Addr::new(10, 96, 0, 0)),
            size: 1 << 20,
        }
    }
}

/// The first usable IP of the range, reserved for the `kubernetes` service.
pub(super) fn kubernetes_service_ip(range: &ServiceRange) -> Ipv4Addr {
    Ipv4Addr::from(range.network + 1)
}

const NODE_PORT_MIN: u16 = 30000;
const NODE_PORT_MAX: u16 = 32767;

pub(super) fn ip_key(ip: &str) -> String {
    format!("/registry/core/serviceips/{ip}")
}

pub(super) fn port_key(port: u16) -> String {
    format!("/registry/core/servicenodeports/{port}")
}

fn invalid(name: &str, field: &str, message: String) -> ApiError {
    ApiError::Invalid {
        group: String::new(),
        kind: "Service".into(),
        name: name.into(),
        causes: vec![FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message,
        }],
    }
}

/// A random-ish starting offset (upstream allocates randomly too).
fn seed() -> u32 {
    let b = uuid::Uuid::new_v4().into_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Reserves `key` for `owner`; `false` when another holds it. A dry run (`dry`) only checks
/// that it is free, as upstream's dry-run allocators do.
async fn reserve(
    ctx: &Ctx,
    key: &str,
    owner: &str,
    held: &HashSet<String>,
    dry: bool,
) -> Result<bool> {
    if held.contains(key) {
        return Ok(true);
    }
    if dry {
        return match ctx.storage.get(key).await {
            Ok(found) => Ok(found.is_none()),
            Err(e) => Err(super::storage_error(e)),
        };
    }
    match ctx.storage.create(key, owner.as_bytes().to_vec()).await {
        Ok(_) => Ok(true),
        Err(storage::Error::AlreadyExists) => Ok(false),
        Err(e) => Err(super::storage_error(e)),
    }
}

/// Releases reservations (best effort: a leaked reservation only wastes one IP or port).
pub(super) async fn release(ctx: &Ctx, keys: &[String]) {
    for key in keys {
        if let Ok(Some(stored)) = ctx.storage.get(key).await {
            let _ = ctx.storage.delete(key, stored.revision).await;
        }
    }
}

/// The reservation keys a stored service holds.
pub(super) fn held_keys(obj: &Map<String, Value>) -> Vec<String> {
    let spec = obj.get("spec");
    let mut keys = Vec::new();
    for ip in spec
        .and_then(|s| s.get("clusterIPs"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(ip) = ip.as_str().filter(|ip| *ip != "None" && !ip.is_empty()) {
            keys.push(ip_key(ip));
        }
    }
    for p in spec
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(port) = p
            .get("nodePort")
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
        {
            keys.push(port_key(port));
        }
    }
    if let Some(port) = spec
        .and_then(|s| s.get("healthCheckNodePort"))
        .and_then(Value::as_u64)
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n != 0)
    {
        keys.push(port_key(port));
    }
    keys
}

/// Allocates the cluster IP and node ports a new service needs; returns the reservation
/// keys taken (to release if the create fails). A dry run (`dry`) picks free ones and
/// reserves nothing.
pub(super) async fn allocate(
    ctx: &Ctx,
    range: &ServiceRange,
    obj: &mut Map<String, Value>,
    dry: bool,
) -> Result<Vec<String>> {
    let name = super::object::meta_str(obj, "name").to_owned();
    let owner = format!("{}/{name}", super::object::meta_str(obj, "namespace"));
    let mut taken = Vec::new();
    let held = HashSet::new();
    let to = Holder {
        name: &name,
        owner: &owner,
        held: &held,
        dry,
    };
    let result = allocate_into(ctx, range, obj, &to, &mut taken).await;
    if dry {
        taken.clear();
    }
    if result.is_err() {
        release(ctx, &taken).await;
    }
    result.map(|()| taken)
}

/// What an update reserved (`taken`, released if the write fails) and what the old object
/// held that the new one no longer does (`freed`, released once the write is stored).
#[derive(Debug, Default)]
pub(super) struct UpdateKeys {
    taken: Vec<String>,
    freed: Vec<String>,
}

/// Allocates what an updated service needs that the stored one did not hold (node ports
/// after a change to NodePort or LoadBalancer, new ports, a cluster IP after ExternalName).
pub(super) async fn allocate_update(
    ctx: &Ctx,
    range: &ServiceRange,
    new: &mut Map<String, Value>,
    old: &Map<String, Value>,
) -> Result<UpdateKeys> {
    let name = super::object::meta_str(new, "name").to_owned();
    let owner = format!("{}/{name}", super::object::meta_str(new, "namespace"));
    let held: HashSet<String> = held_keys(old).into_iter().collect();
    let mut taken = Vec::new();
    let to = Holder {
        name: &name,
        owner: &owner,
        held: &held,
        dry: false,
    };
    let result = allocate_into(ctx, range, new, &to, &mut taken).await;
    if result.is_err() {
        release(ctx, &taken).await;
    }
    result?;
    let now: HashSet<String> = held_keys(new).into_iter().collect();
    let freed = held.into_iter().filter(|k| !now.contains(k)).collect();
    Ok(UpdateKeys { taken, freed })
}

/// After the write: releases what the old object held when it was stored, else what the
/// update reserved.
pub(super) async fn settle(ctx: &Ctx, keys: &UpdateKeys, stored: bool) {
    release(ctx, if stored { &keys.freed } else { &keys.taken }).await;
}

/// Whom an allocation is for: the service's name (for errors), the reservation owner, the
/// keys its stored version already holds, and whether it is a dry run.
struct Holder<'a> {
    name: &'a str,
    owner: &'a str,
    held: &'a HashSet<String>,
    dry: bool,
}

impl Holder<'_> {
    async fn reserve(&self, ctx: &Ctx, key: &str) -> Result<bool> {
        reserve(ctx, key, self.owner, self.held, self.dry).await
    }
}

async fn allocate_into(
    ctx: &Ctx,
    range: &ServiceRange,
    obj: &mut Map<String, Value>,
    to: &Holder<'_>,
    taken: &mut Vec<String>,
) -> Result<()> {
    let (name, held) = (to.name, to.held);
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let svc_type = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_owned();
    if svc_type == "ExternalName" {
        return Ok(());
    }
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if requested == "None" {
        spec.insert("clusterIPs".into(), json!(["None"]));
    } else if requested.is_empty() {
        let start = seed() % range.size;
        let mut chosen = None;
        for i in 0..range.size.min(4096) {
            let offset = (start + i) % range.size;
            // Skip the network address, the reserved first address and the broadcast.
            if offset <= 1 || offset == range.size - 1 {
                continue;
            }
            let ip = Ipv4Addr::from(range.network + offset).to_string();
            if to.reserve(ctx, &ip_key(&ip)).await? {
                chosen = Some(ip);
                break;
            }
        }
        let ip = chosen.ok_or_else(|| {
            invalid(
                name,
                "spec.clusterIPs",
                "failed to allocate IP: range is full".into(),
            )
        })?;
        taken.push(ip_key(&ip));
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
    } else if held.contains(&ip_key(&requested)) {
        spec.insert("clusterIPs".into(), json!([requested]));
    } else {
        let ip: Ipv4Addr = requested.parse().map_err(|_| {
            invalid(
                name,
                "spec.clusterIPs[0]",
                format!("Invalid value: \"{requested}\": must be a valid IP address"),
            )
        })?;
        let n = u32::from(ip);
        if n < range.network || n >= range.network + range.size {
            return Err(invalid(
                name,
                "spec.clusterIPs",
                format!(
                    "Invalid value: []string{{\"{requested}\"}}: failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {}/{}",
                    Ipv4Addr::from(range.network),
                    32 - range.size.trailing_zeros()
                ),
            ));
        }
        if !to.reserve(ctx, &ip_key(&requested)).await? {
            return Err(invalid(
                name,
                "spec.clusterIPs",
                format!(
                    "Invalid value: []string{{\"{requested}\"}}: failed to allocate IP {requested}: provided IP is already allocated"
                ),
            ));
        }
        taken.push(ip_key(&requested));
        spec.insert("clusterIPs".into(), json!([requested]));
    }
    if requested != "None" {
        spec.insert("ipFamilies".into(), json!(["IPv4"]));
        spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
    }
    if svc_type == "NodePort" || svc_type == "LoadBalancer" {
        let allocate_missing = wants_node_ports(spec);
        let count = spec
            .get("ports")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        for i in 0..count {
            let wanted = spec
                .get("ports")
                .and_then(|p| p.get(i))
                .and_then(|p| p.get("nodePort"))
                .and_then(Value::as_u64)
                .and_then(|n| u16::try_from(n).ok());
            if wanted.is_none() && !allocate_missing {
                // `allocateLoadBalancerNodePorts: false`: only the node ports asked for.
                continue;
            }
            let field = format!("spec.ports[{i}].nodePort");
            let port = node_port(ctx, to, wanted, &field).await?;
            if !held.contains(&port_key(port)) {
                taken.push(port_key(port));
            }
            if let Some(p) = spec
                .get_mut("ports")
                .and_then(|p| p.get_mut(i))
                .and_then(Value::as_object_mut)
            {
                p.insert("nodePort".into(), json!(port));
            }
        }
    }
    // The health-check node port of a LoadBalancer with `externalTrafficPolicy: Local`.
    if needs_health_check_node_port(&Value::Object(spec.clone())) {
        let wanted = spec
            .get("healthCheckNodePort")
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n != 0);
        let port = node_port(ctx, to, wanted, "spec.healthCheckNodePort").await?;
        if !held.contains(&port_key(port)) {
            taken.push(port_key(port));
        }
        spec.insert("healthCheckNodePort".into(), json!(port));
    }
    Ok(())
}

/// Reserves node port `wanted` (in range, free or already `held`), or any free one.
async fn node_port(ctx: &Ctx, to: &Holder<'_>, wanted: Option<u16>, field: &str) -> Result<u16> {
    let (name, held) = (to.name, to.held);
    if let Some(p) = wanted {
        if !held.contains(&port_key(p)) && !(NODE_PORT_MIN..=NODE_PORT_MAX).contains(&p) {
            return Err(invalid(
                name,
                field,
                format!(
                    "Invalid value: {p}: provided port is not in the valid range. The range of valid ports is {NODE_PORT_MIN}-{NODE_PORT_MAX}"
                ),
            ));
        }
        if !to.reserve(ctx, &port_key(p)).await? {
            return Err(invalid(
                name,
                field,
                format!("Invalid value: {p}: provided port is already allocated"),
            ));
        }
        return Ok(p);
    }
    let span = u32::from(NODE_PORT_MAX - NODE_PORT_MIN) + 1;
    let start = seed() % span;
    for j in 0..span {
        let p = NODE_PORT_MIN + u16::try_from((start + j) % span).unwrap_or(0);
        // Not `held`: a port the old object held may be named by another of its ports.
        if reserve(ctx, &port_key(p), to.owner, &HashSet::new(), to.dry).await? {
            return Ok(p);
        }
    }
    Err(invalid(name, field, "range of ports is full".into()))
}

fn type_of(spec: &Value) -> &str {
    spec.get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

/// Upstream's `needsNodePort`: a NodePort Service, or a LoadBalancer unless
/// `allocateLoadBalancerNodePorts` is false.
fn wants_node_ports(spec: &Map<String, Value>) -> bool {
    match spec.get("type").and_then(Value::as_str) {
        Some("NodePort") => true,
        Some("LoadBalancer") => {
            spec.get("allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                != Some(false)
        }
        _ => false,
    }
}

/// A type whose ports may carry node ports.
fn node_port_type(spec: &Value) -> bool {
    matches!(type_of(spec), "NodePort" | "LoadBalancer")
}

/// `serviceutil.ExternallyAccessible`.
fn externally_accessible(spec: &Value) -> bool {
    node_port_type(spec)
        || (type_of(spec) == "ClusterIP"
            && spec
                .get("externalIPs")
                .and_then(Value::as_array)
                .is_some_and(|ips| !ips.is_empty()))
}

/// Upstream's `needsHCNodePort`: a LoadBalancer with `externalTrafficPolicy: Local`.
fn needs_health_check_node_port(spec: &Value) -> bool {
    type_of(spec) == "LoadBalancer"
        && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
}

/// The node ports of a spec's ports.
fn node_ports(spec: &Value) -> HashSet<u64> {
    spec.get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter(|n| *n != 0)
        .collect()
}

/// Upstream strategy's `dropTypeDependentFields`: when the type changes, fields that only
/// the old type uses and that the client left unchanged are dropped (a client that sets
/// them anew gets validation's answer). `kubectl patch -p '{"spec":{"type":"ClusterIP"}}'`
/// on a LoadBalancer thus loses its node ports instead of failing validation.
fn drop_type_dependent_fields(new: &mut Map<String, Value>, old: &Map<String, Value>) {
    let old_spec = old.get("spec").cloned().unwrap_or(Value::Null);
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let same = |spec: &Map<String, Value>, field: &str| spec.get(field) == old_spec.get(field);
    let new_type = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_owned();
    // Cluster IPs (ExternalName has none).
    if type_of(&old_spec) != "ExternalName"
        && new_type == "ExternalName"
        && (same(spec, "clusterIP") || spec.get("clusterIP").is_none())
    {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            spec.remove(field);
        }
    }
    let new_spec = Value::Object(spec.clone());
    // Node ports, unless the client asked for one the old object did not have.
    if node_port_type(&old_spec)
        && !node_port_type(&new_spec)
        && node_ports(&new_spec).is_subset(&node_ports(&old_spec))
    {
        for p in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            p.remove("nodePort");
        }
    }
    if needs_health_check_node_port(&old_spec)
        && !needs_health_check_node_port(&new_spec)
        && same(spec, "healthCheckNodePort")
    {
        spec.remove("healthCheckNodePort");
    }
    if type_of(&old_spec) == "LoadBalancer" && new_type != "LoadBalancer" {
        for field in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if same(spec, field) {
                spec.remove(field);
            }
        }
    }
    if externally_accessible(&old_spec)
        && !externally_accessible(&new_spec)
        && same(spec, "externalTrafficPolicy")
    {
        spec.remove("externalTrafficPolicy");
    }
}

/// After the stored status was carried over: a Service that is no LoadBalancer has no
/// load-balancer status (upstream wipes it in the strategy, for consistency).
pub(super) fn clear_load_balancer_status(new: &mut Map<String, Value>) {
    let lb = new
        .get("spec")
        .is_some_and(|s| type_of(s) == "LoadBalancer");
    if lb {
        return;
    }
    if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut)
        && status.contains_key("loadBalancer")
    {
        status.insert("loadBalancer".into(), json!({}));
    }
}

/// On update: fields of the old type dropped (`drop_type_dependent_fields`); cluster IPs
/// are immutable, a client that omits them keeps the stored ones; node ports a client left
/// out stay as allocated while both types want them (upstream's `patchAllocatedValues`).
pub(super) fn carry_over(new: &mut Map<String, Value>, old: &Map<String, Value>) -> Result<()> {
    drop_type_dependent_fields(new, old);
    let name = super::object::meta_str(old, "name").to_owned();
    let old_spec = old.get("spec").cloned().unwrap_or(Value::Null);
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let external_name = spec.get("type").and_then(Value::as_str) == Some("ExternalName");
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        if external_name {
            break;
        }
        let old_v = old_spec.get(field);
        match (spec.get(field), old_v) {
            (None, Some(v)) => {
                spec.insert(field.into(), v.clone());
            }
            (Some(Value::String(s)), Some(_)) if s.is_empty() => {
                if let Some(v) = old_v {
                    spec.insert(field.into(), v.clone());
                }
            }
            (Some(new_v), Some(old_v)) if field == "clusterIP" && new_v != old_v => {
                return Err(invalid(
                    &name,
                    "spec.clusterIPs[0]",
                    format!("Invalid value: []string{{{new_v}}}: may not change once set"),
                ));
            }
            _ => {}
        }
    }
    if needs_health_check_node_port(&old_spec)
        && needs_health_check_node_port(&Value::Object(spec.clone()))
        && !spec.contains_key("healthCheckNodePort")
        && let Some(hc) = old_spec.get("healthCheckNodePort")
    {
        spec.insert("healthCheckNodePort".into(), hc.clone());
    }
    let old_wants = old_spec.as_object().is_some_and(wants_node_ports);
    if !(old_wants && wants_node_ports(spec)) {
        return Ok(());
    }
    let old_ports = old_spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            if p.contains_key("nodePort") {
                continue;
            }
            let same = old_ports
                .iter()
                .find(|o| o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol"));
            if let Some(np) = same.and_then(|o| o.get("nodePort")) {
                p.insert("nodePort".into(), np.clone());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_range_is_10_96_0_0_slash_12() {
        let r = ServiceRange::default();
        assert_eq!(kubernetes_service_ip(&r), Ipv4Addr::new(10, 96, 0, 1));
        assert_eq!(32 - r.size.trailing_zeros(), 12);
    }

    #[test]
    fn held_keys_cover_ips_and_node_ports() {
        let obj = json!({"spec": {"clusterIPs": ["10.96.0.9"], "ports": [{"port": 80, "nodePort": 30080}]}});
        let keys = held_keys(obj.as_object().unwrap());
        assert_eq!(
            keys,
            [
                "/registry/core/serviceips/10.96.0.9",
                "/registry/core/servicenodeports/30080"
            ]
        );
    }

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn a_type_change_drops_unchanged_fields_of_the_old_type_only() {
        let old = obj(json!({"metadata": {"name": "s"}, "spec": {
            "type": "LoadBalancer", "clusterIP": "10.96.0.9", "allocateLoadBalancerNodePorts": true,
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}}));
        // kubectl patch -p '{"spec":{"type":"ClusterIP"}}': everything else as stored.
        let mut new = old.clone();
        new["spec"]["type"] = json!("ClusterIP");
        carry_over(&mut new, &old).unwrap();
        let spec = &new["spec"];
        assert!(spec["ports"][0].get("nodePort").is_none(), "{spec}");
        for gone in [
            "allocateLoadBalancerNodePorts",
            "externalTrafficPolicy",
            "healthCheckNodePort",
        ] {
            assert!(spec.get(gone).is_none(), "{gone}: {spec}");
        }
        assert_eq!(spec["clusterIP"], "10.96.0.9");
        // A node port the old object did not hold is the client's: kept (validation answers).
        let mut asked = old.clone();
        asked["spec"]["type"] = json!("ClusterIP");
        asked["spec"]["ports"][0]["nodePort"] = json!(31999);
        carry_over(&mut asked, &old).unwrap();
        assert_eq!(asked["spec"]["ports"][0]["nodePort"], 31999);
        // LoadBalancer → NodePort keeps the node port and drops the LoadBalancer fields.
        let mut np = old.clone();
        np["spec"]["type"] = json!("NodePort");
        carry_over(&mut np, &old).unwrap();
        assert_eq!(np["spec"]["ports"][0]["nodePort"], 30080);
        assert!(np["spec"].get("allocateLoadBalancerNodePorts").is_none());
        assert_eq!(np["spec"]["externalTrafficPolicy"], "Local");
    }

    #[test]
    fn only_load_balancers_keep_a_load_balancer_status() {
        let mut svc = obj(
            json!({"spec": {"type": "ClusterIP"}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
        );
        clear_load_balancer_status(&mut svc);
        assert_eq!(svc["status"]["loadBalancer"], json!({}));
        let mut lb = obj(
            json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
        );
        clear_load_balancer_status(&mut lb);
        assert_eq!(lb["status"]["loadBalancer"]["ingress"][0]["ip"], "1.2.3.4");
    }

    #[test]
    fn node_ports_are_wanted_by_node_ports_and_allocating_load_balancers() {
        let wants = |v: Value| wants_node_ports(v.as_object().unwrap());
        assert!(wants(json!({"type": "NodePort"})));
        assert!(wants(json!({"type": "LoadBalancer"})));
        assert!(!wants(
            json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false})
        ));
        assert!(!wants(json!({"type": "ClusterIP"})));
    }

    #[test]
    fn changing_a_cluster_ip_is_refused_and_omitting_it_keeps_it() {
        let old = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"]}});
        let mut keep = json!({"spec": {"ports": []}}).as_object().cloned().unwrap();
        carry_over(&mut keep, old.as_object().unwrap()).unwrap();
        assert_eq!(keep["spec"]["clusterIP"], "10.96.0.9");
        let mut change = json!({"spec": {"clusterIP": "10.96.0.10"}})
            .as_object()
            .cloned()
            .unwrap();
        assert!(carry_over(&mut change, old.as_object().unwrap()).is_err());
    }
}
