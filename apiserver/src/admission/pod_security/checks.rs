//! The Pod Security Standards checks (upstream's `k8s.io/pod-security-admission/policy`
//! `check_*.go`), evaluated on a pod's (or pod template's) JSON metadata and spec.
//!
//! Each check gives a reason and a detail; [`evaluate`] runs the checks of a level and
//! version in upstream's order (baseline checks, then restricted ones, each in upstream's
//! check-file order; a restricted check replaces the baseline check it overrides).

use std::collections::BTreeSet;

use serde_json::Value;

use super::levels::{Level, LevelVersion, Version};

/// One failed check: upstream's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Short reason, e.g. `privileged`.
    pub reason: String,
    /// Detail, e.g. `container "c" must not set securityContext.privileged=true`.
    pub detail: String,
}

/// The failed checks of one evaluation (upstream's `AggregateCheckResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

impl Violations {
    /// Whether the pod passed.
    pub fn allowed(&self) -> bool {
        self.0.is_empty()
    }

    /// `reason (detail), reason (detail)` (upstream's `ForbiddenDetail`).
    pub fn detail(&self) -> String {
        self.0
            .iter()
            .map(|v| {
                if v.detail.is_empty() {
                    v.reason.clone()
                } else {
                    format!("{} ({})", v.reason, v.detail)
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The reasons alone (upstream's `ForbiddenReason`).
    pub fn reasons(&self) -> String {
        self.0
            .iter()
            .map(|v| v.reason.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

type CheckFn = fn(&Value, &Value, Version) -> Option<Violation>;

/// Baseline checks in upstream's order, with the minimum version each applies from.
const BASELINE: &[(&str, u32, CheckFn)] = &[
    ("appArmorProfile", 0, app_armor_profile),
    ("capabilities_baseline", 0, capabilities_baseline),
    ("hostNamespaces", 0, host_namespaces),
    ("hostPathVolumes", 0, host_path_volumes),
    ("hostPorts", 0, host_ports),
    ("privileged", 0, privileged),
    ("procMount", 0, proc_mount),
    ("seLinuxOptions", 0, se_linux_options),
    ("seccompProfile_baseline", 0, seccomp_profile_baseline),
    ("sysctls", 0, sysctls),
    ("windowsHostProcess", 0, windows_host_process),
];

/// Restricted checks in upstream's order: id, minimum version, the baseline check it
/// replaces, the check.
const RESTRICTED: &[(&str, u32, Option<&str>, CheckFn)] = &[
    (
        "allowPrivilegeEscalation",
        8,
        None,
        allow_privilege_escalation,
    ),
    (
        "capabilities_restricted",
        22,
        Some("capabilities_baseline"),
        capabilities_restricted,
    ),
    (
        "restrictedVolumes",
        0,
        Some("hostPathVolumes"),
        restricted_volumes,
    ),
    ("runAsNonRoot", 0, None, run_as_non_root),
    ("runAsUser", 23, None, run_as_user),
    (
        "seccompProfile_restricted",
        19,
        Some("seccompProfile_baseline"),
        seccomp_profile_restricted,
    ),
];

/// Evaluates `meta`/`spec` (a pod's or pod template's) against `lv`.
pub fn evaluate(lv: LevelVersion, meta: &Value, spec: &Value) -> Violations {
    let mut out = Vec::new();
    if lv.level == Level::Privileged {
        return Violations(out);
    }
    let restricted = lv.level == Level::Restricted;
    let active_restricted: Vec<_> = RESTRICTED
        .iter()
        .filter(|(_, min, _, _)| restricted && lv.version.at_least(*min))
        .collect();
    for (id, min, check) in BASELINE {
        if !lv.version.at_least(*min)
            || active_restricted
                .iter()
                .any(|(_, _, overrides, _)| *overrides == Some(*id))
        {
            continue;
        }
        out.extend(check(meta, spec, lv.version));
    }
    for (_, _, _, check) in active_restricted {
        out.extend(check(meta, spec, lv.version));
    }
    Violations(out)
}

// --- helpers -----------------------------------------------------------------

fn pluralize<'a>(one: &'a str, many: &'a str, n: usize) -> &'a str {
    if n == 1 { one } else { many }
}

/// `"a", "b"` (Go's `%q` of each, comma-joined).
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| go_quote(s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// Every container, init containers first, then containers, then ephemeral containers
/// (upstream's `visitContainers`).
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |k| {
            spec.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter())
                .into_iter()
                .flatten()
        })
}

fn name(c: &Value) -> String {
    c.get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    (!cur.is_null()).then_some(cur)
}

fn bool_at(v: &Value, path: &[&str]) -> Option<bool> {
    at(v, path).and_then(Value::as_bool)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path).and_then(Value::as_str).unwrap_or("")
}

fn strings_at(v: &Value, path: &[&str]) -> Vec<String> {
    at(v, path)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

fn is_windows(spec: &Value) -> bool {
    str_at(spec, &["os", "name"]) == "windows"
}

/// `pod and containers "a"`-style setters: "pod" if the pod-level value is bad, then the
/// bad containers.
fn setters(pod_bad: bool, bad_containers: &[String]) -> Vec<String> {
    let mut s = Vec::new();
    if pod_bad {
        s.push("pod".to_owned());
    }
    if !bad_containers.is_empty() {
        s.push(containers_phrase(bad_containers));
    }
    s
}

/// The setters (`pod`, `containers "a", "b"`) whose `securityContext` is `bad`: the pod's
/// and each container's (init and ephemeral ones included).
fn security_context_setters(spec: &Value, mut bad: impl FnMut(&Value) -> bool) -> Vec<String> {
    let pod_bad = at(spec, &["securityContext"]).is_some_and(&mut bad);
    let bad_containers: Vec<String> = containers(spec)
        .filter(|c| at(c, &["securityContext"]).is_some_and(&mut bad))
        .map(name)
        .collect();
    setters(pod_bad, &bad_containers)
}

// --- baseline ------------------------------------------------------------------

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor_profile(meta: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut bad_values = BTreeSet::new();
    let mut bad_field = |v: &Value| {
        let Some(profile) = at(v, &["appArmorProfile"]) else {
            return false;
        };
        let ty = str_at(profile, &["type"]);
        let bad = !matches!(ty, "RuntimeDefault" | "Localhost");
        if bad {
            bad_values.insert(ty.to_owned());
        }
        bad
    };
    let mut bad_setters = security_context_setters(spec, &mut bad_field);
    let mut values: Vec<String> = bad_values.into_iter().collect();
    let mut annotations: Vec<String> = meta
        .get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(APPARMOR_ANNOTATION_PREFIX))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or("");
            let ok = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!ok).then(|| format!("{k}={}", go_quote(v)))
        })
        .collect();
    if !annotations.is_empty() {
        annotations.sort();
        bad_setters.push(pluralize("annotation", "annotations", annotations.len()).to_owned());
        values.extend(annotations);
    }
    if bad_setters.is_empty() {
        return None;
    }
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            bad_setters.join(" and "),
            join_quote(&values)
        ),
    )
}

const DEFAULT_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn capabilities_baseline(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let extra: Vec<String> = strings_at(c, &["securityContext", "capabilities", "add"])
            .into_iter()
            .filter(|cap| !DEFAULT_CAPABILITIES.contains(&cap.as_str()))
            .collect();
        if !extra.is_empty() {
            bad_containers.push(name(c));
            caps.extend(extra);
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let caps: Vec<String> = caps.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad_containers),
            join_quote(&caps)
        ),
    )
}

fn host_namespaces(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let set: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|f| bool_at(spec, &[f]) == Some(true))
        .map(|f| format!("{f}=true"))
        .collect();
    if set.is_empty() {
        return None;
    }
    violation("host namespaces", set.join(", "))
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec.get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn host_path_volumes(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let bad: Vec<String> = volumes(spec)
        .filter(|v| at(v, &["hostPath"]).is_some())
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad)
        ),
    )
}

fn host_ports(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut bad = false;
        for p in c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let hp = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if hp != 0 {
                bad = true;
                ports.insert(hp.to_string());
            }
        }
        if bad {
            bad_containers.push(name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad_containers),
            pluralize("uses", "use", bad_containers.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| bool_at(c, &["securityContext", "privileged"]) == Some(true))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

fn proc_mount(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut values = BTreeSet::new();
    for c in containers(spec) {
        let pm = str_at(c, &["securityContext", "procMount"]);
        if !pm.is_empty() && pm != "Default" {
            bad_containers.push(name(c));
            values.insert(pm.to_owned());
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad_containers),
            join_quote(&values)
        ),
    )
}

fn se_linux_options(_: &Value, spec: &Value, version: Version) -> Option<Violation> {
    let mut allowed = vec!["", "container_t", "container_init_t", "container_kvm_t"];
    if version.at_least(31) {
        allowed.push("container_engine_t");
    }
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut bad = |sc: &Value| {
        let Some(opts) = at(sc, &["seLinuxOptions"]) else {
            return false;
        };
        let mut valid = true;
        let ty = str_at(opts, &["type"]);
        if !allowed.contains(&ty) {
            valid = false;
            bad_types.insert(ty.to_owned());
        }
        if !str_at(opts, &["user"]).is_empty() {
            valid = false;
            set_user = true;
        }
        if !str_at(opts, &["role"]).is_empty() {
            valid = false;
            set_role = true;
        }
        !valid
    };
    let bad_setters = security_context_setters(spec, &mut bad);
    if bad_setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_owned());
    }
    if set_role {
        data.push("role may not be set".to_owned());
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            bad_setters.join(" and "),
            data.join("; ")
        ),
    )
}

fn seccomp_profile_baseline(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let bad = |sc: &Value| str_at(sc, &["seccompProfile", "type"]) == "Unconfined";
    let bad_setters = security_context_setters(spec, bad);
    if bad_setters.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to \"Unconfined\"",
            bad_setters.join(" and ")
        ),
    )
}

fn sysctls(_: &Value, spec: &Value, version: Version) -> Option<Violation> {
    let mut allowed = vec![
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ];
    if version.at_least(27) {
        allowed.push("net.ipv4.ip_local_reserved_ports");
    }
    if version.at_least(29) {
        allowed.extend([
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
        ]);
    }
    let bad: Vec<&str> = at(spec, &["securityContext", "sysctls"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| str_at(s, &["name"]))
        .filter(|n| !allowed.contains(n))
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("forbidden sysctls", bad.join(", "))
}

fn windows_host_process(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let bad = |sc: &Value| bool_at(sc, &["windowsOptions", "hostProcess"]) == Some(true);
    let bad_setters = security_context_setters(spec, bad);
    if bad_setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            bad_setters.join(" and ")
        ),
    )
}

// --- restricted ------------------------------------------------------------------

fn allow_privilege_escalation(_: &Value, spec: &Value, version: Version) -> Option<Violation> {
    if version.at_least(25) && is_windows(spec) {
        return None;
    }
    let bad: Vec<String> = containers(spec)
        .filter(|c| bool_at(c, &["securityContext", "allowPrivilegeEscalation"]) != Some(false))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

fn capabilities_restricted(_: &Value, spec: &Value, version: Version) -> Option<Violation> {
    if version.at_least(25) && is_windows(spec) {
        return None;
    }
    let mut missing_drop_all = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        if !strings_at(c, &["securityContext", "capabilities", "drop"])
            .iter()
            .any(|d| d == "ALL")
        {
            missing_drop_all.push(name(c));
        }
        let extra: Vec<String> = strings_at(c, &["securityContext", "capabilities", "add"])
            .into_iter()
            .filter(|a| a != "NET_BIND_SERVICE")
            .collect();
        if !extra.is_empty() {
            adding.push(name(c));
            caps.extend(extra);
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding.is_empty() {
        let caps: Vec<String> = caps.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

const ALLOWED_VOLUME_TYPES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn restricted_volumes(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let mut bad_volumes = Vec::new();
    let mut bad_types = BTreeSet::new();
    for v in volumes(spec) {
        let Some(obj) = v.as_object() else { continue };
        let types: Vec<&String> = obj
            .iter()
            .filter(|(k, val)| *k != "name" && !val.is_null())
            .map(|(k, _)| k)
            .filter(|k| !ALLOWED_VOLUME_TYPES.contains(&k.as_str()))
            .collect();
        if !types.is_empty() {
            bad_volumes.push(name(v));
            bad_types.extend(types.into_iter().cloned());
        }
    }
    if bad_volumes.is_empty() {
        return None;
    }
    let types: Vec<String> = bad_types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad_volumes.len()),
            join_quote(&bad_volumes),
            pluralize("uses", "use", bad_volumes.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let pod_value = bool_at(spec, &["securityContext", "runAsNonRoot"]);
    let pod_non_root = pod_value == Some(true);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match bool_at(c, &["securityContext", "runAsNonRoot"]) {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_non_root => implicit.push(name(c)),
            None => {}
        }
    }
    let bad_setters = setters(pod_value == Some(false), &explicit);
    if !bad_setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                bad_setters.join(" and ")
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    )
}

fn run_as_user(_: &Value, spec: &Value, _: Version) -> Option<Violation> {
    let zero = |sc: &Value| at(sc, &["runAsUser"]).and_then(Value::as_i64) == Some(0);
    let bad_setters = security_context_setters(spec, zero);
    if bad_setters.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", bad_setters.join(" and ")),
    )
}

fn seccomp_profile_restricted(_: &Value, spec: &Value, version: Version) -> Option<Violation> {
    if version.at_least(25) && is_windows(spec) {
        return None;
    }
    let valid = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut bad_values = BTreeSet::new();
    let mut pod_bad = false;
    let mut pod_set = false;
    if at(spec, &["securityContext", "seccompProfile"]).is_some() {
        let t = str_at(spec, &["securityContext", "seccompProfile", "type"]);
        if valid(t) {
            pod_set = true;
        } else {
            pod_bad = true;
            bad_values.insert(t.to_owned());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        if at(c, &["securityContext", "seccompProfile"]).is_some() {
            let t = str_at(c, &["securityContext", "seccompProfile", "type"]);
            if !valid(t) {
                explicit.push(name(c));
                bad_values.insert(t.to_owned());
            }
        } else if !pod_set {
            implicit.push(name(c));
        }
    }
    let bad_setters = setters(pod_bad, &explicit);
    if !bad_setters.is_empty() {
        let values: Vec<String> = bad_values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                bad_setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const RESTRICTED_LATEST: LevelVersion = LevelVersion {
        level: Level::Restricted,
        version: Version::Latest,
    };
    const BASELINE_LATEST: LevelVersion = LevelVersion {
        level: Level::Baseline,
        version: Version::Latest,
    };

    fn check(f: CheckFn, spec: &Value) -> Option<(String, String)> {
        f(&json!({}), spec, Version::Latest).map(|v| (v.reason, v.detail))
    }

    fn want(reason: &str, detail: &str) -> Option<(String, String)> {
        Some((reason.to_owned(), detail.to_owned()))
    }

    #[test]
    fn restricted_pod_with_everything_wrong() {
        let spec = json!({"containers": [{"name": "c", "image": "x",
            "securityContext": {"privileged": true}}]});
        let v = evaluate(RESTRICTED_LATEST, &json!({}), &spec);
        assert_eq!(
            v.detail(),
            "privileged (container \"c\" must not set securityContext.privileged=true), \
             allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        assert_eq!(
            v.reasons(),
            "privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"
        );
        let baseline = evaluate(BASELINE_LATEST, &json!({}), &spec);
        assert_eq!(baseline.reasons(), "privileged");
    }

    #[test]
    fn compliant_restricted_pod_passes() {
        let spec = json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
            "volumes": [{"name": "cm", "configMap": {"name": "x"}}, {"name": "e", "emptyDir": {}}],
        });
        assert!(evaluate(RESTRICTED_LATEST, &json!({}), &spec).allowed());
    }

    #[test]
    fn restricted_overrides_baseline_checks() {
        let spec = json!({"containers": [{"name": "c", "securityContext": {
            "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}}],
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}]});
        let v = evaluate(RESTRICTED_LATEST, &json!({}), &spec);
        assert!(!v.reasons().contains("non-default capabilities"));
        assert!(!v.reasons().contains("hostPath volumes"));
        assert!(v.detail().contains(
            "restricted volume types (volume \"h\" uses restricted volume type \"hostPath\")"
        ));
        let b = evaluate(BASELINE_LATEST, &json!({}), &spec);
        assert_eq!(
            b.detail(),
            "non-default capabilities (container \"c\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add), hostPath volumes (volume \"h\")"
        );
        // Before v1.22 restricted has no capabilities_restricted check, so the baseline one runs.
        let old = LevelVersion {
            level: Level::Restricted,
            version: Version::Minor(21),
        };
        assert!(
            evaluate(old, &json!({}), &spec)
                .reasons()
                .contains("non-default capabilities")
        );
    }

    #[test]
    fn baseline_checks() {
        assert_eq!(
            check(
                host_namespaces,
                &json!({"hostIPC": true, "hostPID": true, "hostNetwork": true})
            ),
            want(
                "host namespaces",
                "hostNetwork=true, hostPID=true, hostIPC=true"
            )
        );
        assert_eq!(
            check(
                host_ports,
                &json!({"containers": [
                {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                {"name": "b", "ports": [{"containerPort": 81, "hostPort": 8081}]}]})
            ),
            want(
                "hostPort",
                "containers \"a\", \"b\" use hostPorts 8080, 8081"
            )
        );
        assert_eq!(
            check(
                proc_mount,
                &json!({"containers": [{"name": "a", "securityContext": {"procMount": "Unmasked"}}]})
            ),
            want(
                "procMount",
                "container \"a\" must not set securityContext.procMount to \"Unmasked\""
            )
        );
        assert_eq!(
            check(
                se_linux_options,
                &json!({"securityContext": {"seLinuxOptions": {"type": "bad_t", "user": "u"}}})
            ),
            want(
                "seLinuxOptions",
                "pod set forbidden securityContext.seLinuxOptions: type \"bad_t\"; user may not be set"
            )
        );
        assert_eq!(
            check(
                seccomp_profile_baseline,
                &json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}},
                "containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]})
            ),
            want(
                "seccompProfile",
                "pod and container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\""
            )
        );
        assert_eq!(
            check(
                sysctls,
                &json!({"securityContext": {"sysctls": [
                {"name": "kernel.shm_rmid_forced", "value": "1"}, {"name": "net.core.somaxconn", "value": "1"}]}})
            ),
            want("forbidden sysctls", "net.core.somaxconn")
        );
        assert_eq!(
            check(
                windows_host_process,
                &json!({"securityContext": {"windowsOptions": {"hostProcess": true}}})
            ),
            want(
                "hostProcess",
                "pod must not set securityContext.windowsOptions.hostProcess=true"
            )
        );
        assert_eq!(
            check(
                app_armor_profile,
                &json!({"containers": [{"name": "a", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]})
            ),
            want(
                "forbidden AppArmor profile",
                "container \"a\" must not set AppArmor profile type to \"Unconfined\""
            )
        );
        assert_eq!(
            check(
                capabilities_baseline,
                &json!({"containers": [{"name": "a", "securityContext": {"capabilities": {"add": ["NET_RAW", "CHOWN"]}}}]})
            ),
            want(
                "non-default capabilities",
                "container \"a\" must not include \"NET_RAW\" in securityContext.capabilities.add"
            )
        );
    }

    #[test]
    fn app_armor_annotations_and_fields() {
        let meta = json!({"annotations": {
            "container.apparmor.security.beta.kubernetes.io/a": "unconfined",
            "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
        }});
        let spec = json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
            "containers": [{"name": "a", "securityContext": {"appArmorProfile": {"type": "Localhost"}}}]});
        let v = app_armor_profile(&meta, &spec, Version::Latest).unwrap();
        assert_eq!(v.reason, "forbidden AppArmor profiles");
        assert_eq!(
            v.detail,
            r#"pod and annotation must not set AppArmor profile type to "Unconfined", "container.apparmor.security.beta.kubernetes.io/a=\"unconfined\"""#
        );
    }

    #[test]
    fn restricted_checks() {
        assert_eq!(
            check(
                run_as_non_root,
                &json!({"securityContext": {"runAsNonRoot": false},
                "containers": [{"name": "a", "securityContext": {"runAsNonRoot": false}}]})
            ),
            want(
                "runAsNonRoot != true",
                "pod and container \"a\" must not set securityContext.runAsNonRoot=false"
            )
        );
        assert_eq!(
            check(
                run_as_user,
                &json!({"containers": [{"name": "a", "securityContext": {"runAsUser": 0}}]})
            ),
            want("runAsUser=0", "container \"a\" must not set runAsUser=0")
        );
        assert_eq!(
            check(
                seccomp_profile_restricted,
                &json!({"containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]})
            ),
            want(
                "seccompProfile",
                "container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\""
            )
        );
        assert_eq!(
            check(
                capabilities_restricted,
                &json!({"containers": [{"name": "a", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]}}}]})
            ),
            want(
                "unrestricted capabilities",
                "container \"a\" must set securityContext.capabilities.drop=[\"ALL\"]; container \"a\" must not include \"NET_ADMIN\", \"SYS_ADMIN\" in securityContext.capabilities.add"
            )
        );
        assert_eq!(
            check(
                allow_privilege_escalation,
                &json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]})
            ),
            None
        );
    }
}
