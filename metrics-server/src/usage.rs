//! Simulated resource usage: a deterministic function of each container's requests and
//! limits, overridable per pod by annotation, so tests and demos can drive load.
//!
//! - [`CPU_ANNOTATION`] (`metrics.capstan.io/cpu`, e.g. `"750m"`) and
//!   [`MEMORY_ANNOTATION`] (`metrics.capstan.io/memory`, e.g. `"200Mi"`) set the pod's total
//!   usage, shared between its containers in proportion to their requests (equally when none
//!   has one);
//! - otherwise each container uses half its request, else a quarter of its limit, else
//!   [`IDLE_CPU_NANOS`] and [`IDLE_MEMORY_BYTES`];
//! - a node uses the sum of its running pods plus [`NODE_CPU_OVERHEAD_NANOS`] and
//!   [`NODE_MEMORY_OVERHEAD_BYTES`] (the system daemons a kubelet's node reports).

use k8s_openapi::api::core::v1::{Container, Pod};

/// Annotation overriding a pod's total CPU usage (a quantity of cores).
pub const CPU_ANNOTATION: &str = "metrics.capstan.io/cpu";
/// Annotation overriding a pod's total memory usage (a quantity of bytes).
pub const MEMORY_ANNOTATION: &str = "metrics.capstan.io/memory";
/// CPU of a container with neither request nor limit: 1 millicore.
pub const IDLE_CPU_NANOS: u64 = 1_000_000;
/// Memory of a container with neither request nor limit: 4 MiB.
pub const IDLE_MEMORY_BYTES: u64 = 4 << 20;
/// CPU a node uses besides its pods: 50 millicores.
pub const NODE_CPU_OVERHEAD_NANOS: u64 = 50_000_000;
/// Memory a node uses besides its pods: 256 MiB.
pub const NODE_MEMORY_OVERHEAD_BYTES: u64 = 256 << 20;

/// Usage of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    /// Container name.
    pub name: String,
    /// CPU in nanocores.
    pub cpu_nanos: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

fn amount(c: &Container, which: &str, resource: &str) -> Option<f64> {
    let r = c.resources.as_ref()?;
    let map = if which == "requests" {
        r.requests.as_ref()
    } else {
        r.limits.as_ref()
    };
    lean::quantity::to_f64(&map?.get(resource)?.0)
}

fn default_usage(c: &Container, resource: &str, idle: u64, scale: f64) -> u64 {
    if let Some(r) = amount(c, "requests", resource) {
        (r * 0.5 * scale) as u64
    } else if let Some(l) = amount(c, "limits", resource) {
        (l * 0.25 * scale) as u64
    } else {
        idle
    }
}

/// Splits `total` (base units × `scale`) between `containers` by their requests.
fn shares(containers: &[Container], resource: &str, total: f64) -> Vec<u64> {
    let requests: Vec<f64> = containers
        .iter()
        .map(|c| amount(c, "requests", resource).unwrap_or(0.0))
        .collect();
    let sum: f64 = requests.iter().sum();
    let n = containers.len().max(1) as f64;
    requests
        .iter()
        .map(|r| {
            if sum > 0.0 {
                (total * r / sum) as u64
            } else {
                (total / n) as u64
            }
        })
        .collect()
}

/// The usage of each container of `pod`.
pub fn pod_usage(pod: &Pod) -> Vec<ContainerUsage> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let annotations = pod.metadata.annotations.as_ref();
    let cpu_override = annotations
        .and_then(|a| a.get(CPU_ANNOTATION))
        .and_then(|q| lean::quantity::to_f64(q));
    let memory_override = annotations
        .and_then(|a| a.get(MEMORY_ANNOTATION))
        .and_then(|q| lean::quantity::to_f64(q));
    let cpu: Vec<u64> = match cpu_override {
        Some(total) => shares(&spec.containers, "cpu", total * 1e9),
        None => spec
            .containers
            .iter()
            .map(|c| default_usage(c, "cpu", IDLE_CPU_NANOS, 1e9))
            .collect(),
    };
    let memory: Vec<u64> = match memory_override {
        Some(total) => shares(&spec.containers, "memory", total),
        None => spec
            .containers
            .iter()
            .map(|c| default_usage(c, "memory", IDLE_MEMORY_BYTES, 1.0))
            .collect(),
    };
    spec.containers
        .iter()
        .zip(cpu.into_iter().zip(memory))
        .map(|(c, (cpu_nanos, memory_bytes))| ContainerUsage {
            name: c.name.clone(),
            cpu_nanos,
            memory_bytes,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &serde_json::Value, annotations: &serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "p", "annotations": annotations },
            "spec": { "containers": containers },
        }))
        .unwrap()
    }

    #[test]
    fn quantities_parse_in_base_units() {
        assert_eq!(lean::quantity::to_f64("250m"), Some(0.25));
        assert_eq!(lean::quantity::to_f64("2"), Some(2.0));
        assert_eq!(lean::quantity::to_f64("64Mi"), Some(64.0 * 1024.0 * 1024.0));
        assert_eq!(lean::quantity::to_f64("1500000n"), Some(0.0015));
        assert_eq!(lean::quantity::to_f64("1e3"), Some(1000.0));
        assert_eq!(lean::quantity::to_f64("x"), None);
    }

    #[test]
    fn usage_is_half_the_request_unless_annotated() {
        let containers = serde_json::json!([
            { "name": "a", "resources": { "requests": { "cpu": "200m", "memory": "100Mi" } } },
            { "name": "b", "resources": { "limits": { "cpu": "1" } } },
            { "name": "c" },
        ]);
        let u = pod_usage(&pod(&containers, &serde_json::json!({})));
        assert_eq!(u[0].cpu_nanos, 100_000_000);
        assert_eq!(u[0].memory_bytes, 50 << 20);
        assert_eq!(u[1].cpu_nanos, 250_000_000);
        assert_eq!(u[2].cpu_nanos, IDLE_CPU_NANOS);
        let u = pod_usage(&pod(
            &containers,
            &serde_json::json!({ CPU_ANNOTATION: "900m", MEMORY_ANNOTATION: "300Mi" }),
        ));
        // Only `a` has a CPU request: it takes the whole override.
        assert_eq!(u[0].cpu_nanos, 900_000_000);
        assert_eq!(u[1].cpu_nanos, 0);
        assert_eq!(u[0].memory_bytes, 300 << 20);
    }
}
