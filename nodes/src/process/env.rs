//! A container's environment as the kubelet builds it (`makeEnvironmentVariables`):
//! `envFrom` (ConfigMaps and Secrets, with their prefix), then `env` in order (values with
//! `$(VAR)` expanded, `valueFrom` field, resource, ConfigMap and Secret references), then
//! the service variables of the API server (`KUBERNETES_SERVICE_HOST`/`PORT`, pointing at
//! the real API server), then the runtime's defaults (`PATH`, `HOSTNAME`, `HOME`).

use std::collections::HashMap;

use base64::Engine;
use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::Value;

use crate::api::{Call, FleetApi, status_code};

/// ConfigMaps and Secrets read while preparing one pod, read once each.
pub(crate) struct Objects<'a> {
    api: &'a FleetApi,
    node: &'a str,
    namespace: String,
    cache: HashMap<(&'static str, String), Option<Value>>,
}

impl<'a> Objects<'a> {
    /// A cache reading pod `namespace`'s objects as `node`.
    pub(crate) fn new(api: &'a FleetApi, node: &'a str, namespace: &str) -> Self {
        Objects {
            api,
            node,
            namespace: namespace.to_owned(),
            cache: HashMap::new(),
        }
    }

    /// The `kind` (`configmaps` or `secrets`) named `name`, `None` if it does not exist.
    pub(crate) async fn get(
        &mut self,
        kind: &'static str,
        name: &str,
    ) -> Result<Option<Value>, String> {
        let key = (kind, name.to_owned());
        if let Some(v) = self.cache.get(&key) {
            return Ok(v.clone());
        }
        let path = format!("/api/v1/namespaces/{}/{kind}/{name}", self.namespace);
        let got = match self
            .api
            .send::<Value>(Some(self.node), &Call::get(path))
            .await
        {
            Ok(v) => Some(v),
            Err(e) if status_code(&e) == Some(404) => None,
            Err(e) => return Err(format!("reading {kind} {name:?}: {e}")),
        };
        self.cache.insert(key, got.clone());
        Ok(got)
    }

    /// The key/value pairs of a ConfigMap or Secret (Secret values decoded).
    pub(crate) async fn data(
        &mut self,
        kind: &'static str,
        name: &str,
    ) -> Result<Option<Vec<(String, Vec<u8>)>>, String> {
        let Some(obj) = self.get(kind, name).await? else {
            return Ok(None);
        };
        let mut out = Vec::new();
        let decode = |v: &str| base64::engine::general_purpose::STANDARD.decode(v).ok();
        if let Some(map) = obj.get("data").and_then(Value::as_object) {
            for (k, v) in map {
                let Some(s) = v.as_str() else { continue };
                let bytes = if kind == "secrets" {
                    decode(s).unwrap_or_default()
                } else {
                    s.as_bytes().to_vec()
                };
                out.push((k.clone(), bytes));
            }
        }
        if let Some(map) = obj.get("binaryData").and_then(Value::as_object) {
            for (k, v) in map {
                if let Some(b) = v.as_str().and_then(decode) {
                    out.push((k.clone(), b));
                }
            }
        }
        out.sort();
        Ok(Some(out))
    }
}

/// Expands `$(NAME)` references from `vars` as the kubelet does (`$$` escapes a `$`;
/// unknown references are kept as written).
pub(crate) fn expand(s: &str, vars: &HashMap<String, String>) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            if bytes[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if bytes[i + 1] == b'('
                && let Some(end) = s[i + 2..].find(')')
            {
                let name = &s[i + 2..i + 2 + end];
                match vars.get(name) {
                    Some(v) => out.push_str(v),
                    None => out.push_str(&s[i..i + 3 + end]),
                }
                i += 3 + end;
                continue;
            }
        }
        let ch = s[i..].chars().next().unwrap_or('\0');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The value of a downward-API field path of `pod` (`metadata.name`, `metadata.labels['k']`,
/// `spec.nodeName`, `status.podIP`, …).
pub(crate) fn field_value(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Option<String> {
    let meta = &pod.metadata;
    let pick = |map: &Option<std::collections::BTreeMap<String, String>>, key: &str| {
        map.as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let keyed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_owned)
    };
    let render_map = |map: &Option<std::collections::BTreeMap<String, String>>| {
        map.iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Some(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => render_map(&meta.labels),
        "metadata.annotations" => render_map(&meta.annotations),
        "spec.nodeName" => pod.spec.as_ref()?.node_name.clone().unwrap_or_default(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()?
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into()),
        "status.podIP" | "status.podIPs" => pod_ip.to_owned(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_owned(),
        _ => {
            if let Some(k) = keyed("metadata.labels") {
                pick(&meta.labels, &k)
            } else if let Some(k) = keyed("metadata.annotations") {
                pick(&meta.annotations, &k)
            } else {
                return None;
            }
        }
    })
}

/// A `resourceFieldRef` value: the container's limit or request (limits default to the
/// node's allocatable `cpu`/`memory`), divided by `divisor` and rounded up, as the kubelet.
fn resource_value(
    c: &Container,
    resource: &str,
    divisor: Option<&str>,
    node_cpu: &str,
    node_memory: &str,
) -> Option<String> {
    let (section, name) = resource.split_once('.')?;
    let res = c.resources.as_ref();
    let map = match section {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => return None,
    };
    let given = map.and_then(|m| m.get(name)).map(|q| q.0.clone());
    let raw = match (given, section, name) {
        (Some(v), _, _) => v,
        (None, "limits", "cpu") => node_cpu.to_owned(),
        (None, "limits", "memory") => node_memory.to_owned(),
        (None, _, _) => "0".to_owned(),
    };
    let value = parse_quantity(&raw)?;
    let div = divisor
        .and_then(parse_quantity)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    Some(format!("{}", (value / div).ceil() as i64))
}

/// A resource quantity as a number (`500m`, `2`, `1Gi`, `10M`).
fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        _ => return None,
    };
    Some(n * mult)
}

/// What the environment is built from besides the pod.
pub(crate) struct Context<'a> {
    /// The pod's IP.
    pub(crate) pod_ip: &'a str,
    /// The node's IP.
    pub(crate) host_ip: &'a str,
    /// The API server's host and port.
    pub(crate) api_host: &'a str,
    /// See `api_host`.
    pub(crate) api_port: &'a str,
    /// The node's allocatable CPU and memory (resource defaults).
    pub(crate) node_cpu: &'a str,
    /// See `node_cpu`.
    pub(crate) node_memory: &'a str,
    /// The container's user ID (for `HOME`).
    pub(crate) uid: u32,
}

/// The environment of container `c` of `pod`; an error names what is missing (the kubelet's
/// `CreateContainerConfigError`).
pub(crate) async fn build(
    objects: &mut Objects<'_>,
    pod: &Pod,
    c: &Container,
    ctx: &Context<'_>,
) -> Result<Vec<(String, String)>, String> {
    let mut order: Vec<String> = Vec::new();
    let mut vars: HashMap<String, String> = HashMap::new();
    let set =
        |order: &mut Vec<String>, vars: &mut HashMap<String, String>, k: String, v: String| {
            if !vars.contains_key(&k) {
                order.push(k.clone());
            }
            vars.insert(k, v);
        };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, name, optional) = if let Some(r) = &from.config_map_ref {
            ("configmaps", r.name.clone(), r.optional.unwrap_or(false))
        } else if let Some(r) = &from.secret_ref {
            ("secrets", r.name.clone(), r.optional.unwrap_or(false))
        } else {
            continue;
        };
        match objects.data(kind, &name).await? {
            Some(data) => {
                for (k, v) in data {
                    set(
                        &mut order,
                        &mut vars,
                        format!("{prefix}{k}"),
                        String::from_utf8_lossy(&v).into_owned(),
                    );
                }
            }
            None if optional => {}
            None => {
                let what = if kind == "secrets" {
                    "secret"
                } else {
                    "configmap"
                };
                return Err(format!("{what} \"{name}\" not found"));
            }
        }
    }
    let mut service = vec![
        (
            "KUBERNETES_SERVICE_HOST".to_owned(),
            ctx.api_host.to_owned(),
        ),
        (
            "KUBERNETES_SERVICE_PORT".to_owned(),
            ctx.api_port.to_owned(),
        ),
        (
            "KUBERNETES_SERVICE_PORT_HTTPS".to_owned(),
            ctx.api_port.to_owned(),
        ),
        (
            "KUBERNETES_PORT".to_owned(),
            format!("tcp://{}:{}", ctx.api_host, ctx.api_port),
        ),
    ];
    let lookup_base: HashMap<String, String> = service.iter().cloned().collect();
    for e in c.env.iter().flatten() {
        let value = if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                field_value(pod, &f.field_path, ctx.pod_ip, ctx.host_ip)
                    .ok_or_else(|| format!("unsupported fieldPath {:?}", f.field_path))?
            } else if let Some(r) = &from.resource_field_ref {
                let divisor = r.divisor.as_ref().map(|d| d.0.as_str());
                let target = r
                    .container_name
                    .as_deref()
                    .and_then(|n| pod.spec.as_ref()?.containers.iter().find(|x| x.name == n))
                    .unwrap_or(c);
                resource_value(target, &r.resource, divisor, ctx.node_cpu, ctx.node_memory)
                    .ok_or_else(|| format!("unsupported resource {:?}", r.resource))?
            } else if let Some(r) = &from.config_map_key_ref {
                match lookup_key(objects, "configmaps", &r.name, &r.key).await? {
                    Some(v) => v,
                    None if r.optional.unwrap_or(false) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {}/{}",
                            r.key, objects.namespace, r.name
                        ));
                    }
                }
            } else if let Some(r) = &from.secret_key_ref {
                match lookup_key(objects, "secrets", &r.name, &r.key).await? {
                    Some(v) => v,
                    None if r.optional.unwrap_or(false) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in Secret {}/{}",
                            r.key, objects.namespace, r.name
                        ));
                    }
                }
            } else {
                String::new()
            }
        } else {
            let mut scope = lookup_base.clone();
            scope.extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
            expand(e.value.as_deref().unwrap_or_default(), &scope)
        };
        set(&mut order, &mut vars, e.name.clone(), value);
    }
    service.retain(|(k, _)| !vars.contains_key(k));
    for (k, v) in service {
        set(&mut order, &mut vars, k, v);
    }
    let name = pod.metadata.name.clone().unwrap_or_default();
    let home = if ctx.uid == 0 { "/root" } else { "/" };
    for (k, v) in [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("HOSTNAME", name.as_str()),
        ("HOME", home),
    ] {
        if !vars.contains_key(k) {
            set(&mut order, &mut vars, k.to_owned(), v.to_owned());
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|k| vars.remove(&k).map(|v| (k, v)))
        .collect())
}

async fn lookup_key(
    objects: &mut Objects<'_>,
    kind: &'static str,
    name: &str,
    key: &str,
) -> Result<Option<String>, String> {
    Ok(objects.data(kind, name).await?.and_then(|d| {
        d.into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_expand_as_the_kubelet_expands_them() {
        let vars: HashMap<String, String> = [("A".to_owned(), "x".to_owned())].into();
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "x-$(B)-$(A)-$");
        assert_eq!(expand("é$(A", &vars), "é$(A");
    }

    #[test]
    fn quantities_and_fields_are_read() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("1Gi"), Some(1073741824.0));
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"nodeName": "n0", "containers": []}
        }))
        .unwrap();
        assert_eq!(
            field_value(&pod, "metadata.labels['app']", "", "").as_deref(),
            Some("web")
        );
        assert_eq!(
            field_value(&pod, "spec.nodeName", "", "").as_deref(),
            Some("n0")
        );
        assert_eq!(
            field_value(&pod, "status.podIP", "1.2.3.4", "").as_deref(),
            Some("1.2.3.4")
        );
    }
}
