//! A pod's volumes materialised under `<pod dir>/volumes/<name>` before its containers
//! start: `emptyDir` (mode 0777), `configMap`, `secret`, `downwardAPI` and `projected`
//! (service-account token from a TokenRequest bound to the pod, ConfigMaps such as
//! `kube-root-ca.crt`, Secrets, downward-API fields) written as files, `hostPath` used in
//! place. Other volume types are refused with a message (the pod's FailedMount event).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{KeyToPath, Pod, Volume};
use serde_json::{Value, json};

use super::env::{Objects, field_value};
use crate::api::{Call, FleetApi};

/// Default expiry of a projected service-account token (the kubelet asks for one hour).
const TOKEN_SECONDS: i64 = 3600;

/// Files of one volume source: relative path → (content, mode).
type Files = Vec<(String, Vec<u8>, u32)>;

/// What the volumes are written with.
pub(crate) struct Writer<'a> {
    /// API access as the node.
    pub(crate) api: &'a FleetApi,
    /// The node's name.
    pub(crate) node: &'a str,
    /// `<pod dir>/volumes`.
    pub(crate) dir: PathBuf,
    /// Owner of the files (the pod's user and group, or fsGroup).
    pub(crate) owner: (u32, u32),
    /// Pod IP and host IP for downward-API fields.
    pub(crate) pod_ip: &'a str,
    /// See `pod_ip`.
    pub(crate) host_ip: &'a str,
}

/// A relative path that stays inside its volume.
fn safe_relative(p: &str) -> bool {
    !p.is_empty()
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

fn mode_of(m: Option<i32>, default: u32) -> u32 {
    m.map_or(default, |m| m.unsigned_abs() & 0o7777)
}

/// The files a ConfigMap/Secret contributes: all keys, or only `items` (each to its path).
fn select(
    data: Vec<(String, Vec<u8>)>,
    items: Option<&Vec<KeyToPath>>,
    mode: u32,
    what: &str,
) -> Result<Files, String> {
    match items {
        None => Ok(data.into_iter().map(|(k, v)| (k, v, mode)).collect()),
        Some(items) => {
            let mut out = Vec::new();
            for it in items {
                let Some((_, v)) = data.iter().find(|(k, _)| *k == it.key) else {
                    return Err(format!("{what}: key {:?} not found", it.key));
                };
                out.push((it.path.clone(), v.clone(), mode_of(it.mode, mode)));
            }
            Ok(out)
        }
    }
}

impl Writer<'_> {
    /// Materialises every volume of `pod`; returns volume name → host path.
    pub(crate) async fn prepare(
        &self,
        pod: &Pod,
        objects: &mut Objects<'_>,
    ) -> Result<HashMap<String, PathBuf>, String> {
        let mut out = HashMap::new();
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for v in &volumes {
            let path = self.volume(pod, v, objects).await?;
            out.insert(v.name.clone(), path);
        }
        Ok(out)
    }

    /// Requests every projected service-account token of `pod` again and replaces its file
    /// (a new file renamed over the old, so readers see one or the other), as the kubelet
    /// rotates them. Returns the shortest expiry, when there are tokens.
    pub(crate) async fn refresh_tokens(&self, pod: &Pod) -> Result<Option<i64>, String> {
        let mut shortest: Option<i64> = None;
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for v in &volumes {
            let Some(p) = &v.projected else { continue };
            let mode = mode_of(p.default_mode, 0o644);
            for t in p
                .sources
                .iter()
                .flatten()
                .filter_map(|s| s.service_account_token.as_ref())
            {
                if !safe_relative(&t.path) {
                    continue;
                }
                let seconds = t.expiration_seconds.unwrap_or(TOKEN_SECONDS);
                let token = self
                    .token(pod, t.audience.as_deref(), Some(seconds))
                    .await?;
                let dir = self.dir.join(&v.name);
                let path = dir.join(&t.path);
                let tmp = dir.join(format!(".{}.new", t.path.replace('/', "_")));
                let io = |e: std::io::Error| format!("rotating {}: {e}", path.display());
                std::fs::write(&tmp, token).map_err(io)?;
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
                    .map_err(io)?;
                std::os::unix::fs::chown(&tmp, Some(self.owner.0), Some(self.owner.1))
                    .map_err(io)?;
                std::fs::rename(&tmp, &path).map_err(io)?;
                shortest = Some(shortest.map_or(seconds, |s| s.min(seconds)));
            }
        }
        Ok(shortest)
    }

    async fn volume(
        &self,
        pod: &Pod,
        v: &Volume,
        objects: &mut Objects<'_>,
    ) -> Result<PathBuf, String> {
        let dir = self.dir.join(&v.name);
        let io = |e: std::io::Error| format!("volume {:?}: {e}", v.name);
        if let Some(h) = &v.host_path {
            let p = PathBuf::from(&h.path);
            if matches!(h.type_.as_deref(), Some("DirectoryOrCreate")) {
                std::fs::create_dir_all(&p).map_err(io)?;
            }
            return Ok(p);
        }
        if v.empty_dir.is_some() {
            std::fs::create_dir_all(&dir).map_err(io)?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(io)?;
            return Ok(dir);
        }
        let files: Files = if let Some(cm) = &v.config_map {
            let mode = mode_of(cm.default_mode, 0o644);
            match objects.data("configmaps", &cm.name).await? {
                Some(d) => select(
                    d,
                    cm.items.as_ref(),
                    mode,
                    &format!("configmap {:?}", cm.name),
                )?,
                None if cm.optional.unwrap_or(false) => Vec::new(),
                None => return Err(format!("configmap \"{}\" not found", cm.name)),
            }
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let mode = mode_of(s.default_mode, 0o644);
            match objects.data("secrets", &name).await? {
                Some(d) => select(d, s.items.as_ref(), mode, &format!("secret {name:?}"))?,
                None if s.optional.unwrap_or(false) => Vec::new(),
                None => return Err(format!("secret \"{name}\" not found")),
            }
        } else if let Some(d) = &v.downward_api {
            let mode = mode_of(d.default_mode, 0o644);
            let mut out = Vec::new();
            for it in d.items.iter().flatten() {
                if let Some(f) = &it.field_ref {
                    let value = field_value(pod, &f.field_path, self.pod_ip, self.host_ip)
                        .ok_or_else(|| format!("unsupported fieldPath {:?}", f.field_path))?;
                    out.push((it.path.clone(), value.into_bytes(), mode_of(it.mode, mode)));
                }
            }
            out
        } else if let Some(p) = &v.projected {
            let mode = mode_of(p.default_mode, 0o644);
            let mut out = Vec::new();
            for src in p.sources.iter().flatten() {
                if let Some(t) = &src.service_account_token {
                    let token = self
                        .token(pod, t.audience.as_deref(), t.expiration_seconds)
                        .await?;
                    out.push((t.path.clone(), token.into_bytes(), mode));
                } else if let Some(cm) = &src.config_map {
                    match objects.data("configmaps", &cm.name).await? {
                        Some(d) => out.extend(select(
                            d,
                            cm.items.as_ref(),
                            mode,
                            &format!("configmap {:?}", cm.name),
                        )?),
                        None if cm.optional.unwrap_or(false) => {}
                        None => return Err(format!("configmap \"{}\" not found", cm.name)),
                    }
                } else if let Some(s) = &src.secret {
                    match objects.data("secrets", &s.name).await? {
                        Some(d) => out.extend(select(
                            d,
                            s.items.as_ref(),
                            mode,
                            &format!("secret {:?}", s.name),
                        )?),
                        None if s.optional.unwrap_or(false) => {}
                        None => return Err(format!("secret \"{}\" not found", s.name)),
                    }
                } else if let Some(d) = &src.downward_api {
                    for it in d.items.iter().flatten() {
                        if let Some(f) = &it.field_ref {
                            let value = field_value(pod, &f.field_path, self.pod_ip, self.host_ip)
                                .ok_or_else(|| {
                                    format!("unsupported fieldPath {:?}", f.field_path)
                                })?;
                            out.push((it.path.clone(), value.into_bytes(), mode_of(it.mode, mode)));
                        }
                    }
                }
            }
            out
        } else {
            return Err(format!(
                "volume {:?}: this volume type is not supported by Capstan's process runtime (emptyDir, hostPath, configMap, secret, downwardAPI and projected are)",
                v.name
            ));
        };
        self.write(&dir, &files).map_err(io)?;
        Ok(dir)
    }

    /// Writes `files` into `dir` (created, owned by the pod's user).
    fn write(&self, dir: &Path, files: &Files) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let (uid, gid) = self.owner;
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
        for (rel, content, mode) in files {
            if !safe_relative(rel) {
                return Err(std::io::Error::other(format!("invalid path {rel:?}")));
            }
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, content)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))?;
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// A service-account token bound to `pod` (TokenRequest as the node).
    async fn token(
        &self,
        pod: &Pod,
        audience: Option<&str>,
        seconds: Option<i64>,
    ) -> Result<String, String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let mut spec = json!({
            "expirationSeconds": seconds.unwrap_or(TOKEN_SECONDS),
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.metadata.name,
                "uid": pod.metadata.uid,
            },
        });
        if let Some(a) = audience.filter(|a| !a.is_empty()) {
            spec["audiences"] = json!([a]);
        }
        let body =
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token");
        let answer: Value = self
            .api
            .send(Some(self.node), &Call::post(path, &body))
            .await
            .map_err(|e| format!("requesting a token for service account {ns}/{sa}: {e}"))?;
        answer
            .pointer("/status/token")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| "TokenRequest answered without a token".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_paths_stay_inside_the_volume() {
        assert!(safe_relative("a/b.txt"));
        assert!(!safe_relative("../x"));
        assert!(!safe_relative("/etc/passwd"));
        assert!(!safe_relative(""));
    }
}
