//! Resource quantities and pod requests as the scheduler counts them: CPU in millicores,
//! everything else in whole units, pod requests computed as `resource.PodRequests` does
//! (app containers plus sidecars, the largest init-container phase, plus overhead).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The CPU request a container without one counts as when scoring (upstream's
/// `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory request a container without one counts as when scoring (200 MiB,
/// upstream's `DefaultMemoryRequest`).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An amount of each resource: CPU in millicores, memory and ephemeral storage in bytes,
/// extended resources (and hugepages) in whole units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU in millicores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Every other resource by name (extended resources, hugepages).
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Reads a resource list (`requests`, `allocatable`, `overhead`).
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Resources {
        let mut r = Resources::default();
        for (name, q) in list {
            match name.as_str() {
                "cpu" => r.milli_cpu = parse_milli(&q.0),
                "memory" => r.memory = parse_units(&q.0),
                "ephemeral-storage" => r.ephemeral_storage = parse_units(&q.0),
                "pods" => {}
                other => {
                    r.scalar.insert(other.to_owned(), parse_units(&q.0));
                }
            }
        }
        r
    }

    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    /// Subtracts `other` from `self`.
    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e -= *v;
        }
    }

    /// Raises each resource of `self` to at least `other`'s.
    fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// True when nothing is requested at all.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// A quantity's value times 1000, rounded up (CPU millicores).
pub fn parse_milli(s: &str) -> i64 {
    parse_scaled(s, 3)
}

/// A quantity's value rounded up to whole units (bytes, counts).
pub fn parse_units(s: &str) -> i64 {
    parse_scaled(s, 0)
}

/// Parses a Kubernetes quantity (`1.5`, `100m`, `2Gi`, `1e3`) and returns value × 10^`scale`,
/// rounded up as `Quantity.MilliValue`/`Value` do; 0 for malformed input.
fn parse_scaled(s: &str, scale: i32) -> i64 {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return 0;
    }
    let digits = format!("{int_part}{frac_part}");
    let Ok(mantissa) = digits.parse::<i128>() else {
        return 0;
    };
    let frac_digits = i32::try_from(frac_part.len()).unwrap_or(0);
    let (binary, dec_exp): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .and_then(|e| e.parse::<i32>().ok());
            match exp {
                Some(e) => (1, e),
                None => return 0,
            }
        }
    };
    let exp = dec_exp + scale - frac_digits;
    let mut value = mantissa.saturating_mul(binary);
    if exp >= 0 {
        for _ in 0..exp.min(40) {
            value = value.saturating_mul(10);
        }
    } else {
        let mut div: i128 = 1;
        for _ in 0..(-exp).min(38) {
            div = div.saturating_mul(10);
        }
        value = (value + div - 1) / div;
    }
    let v = i64::try_from(value).unwrap_or(i64::MAX);
    if neg { -v } else { v }
}

/// What a pod asks for: the requests that must fit, the requests scoring uses (with the
/// non-zero defaults for CPU and memory) and its host ports.
#[derive(Debug, Clone, Default)]
pub struct PodRequests {
    /// Requests the NodeResourcesFit filter checks.
    pub requests: Resources,
    /// CPU millicores for scoring (containers without a CPU request count 100m).
    pub non_zero_cpu: i64,
    /// Memory bytes for scoring (containers without a memory request count 200Mi).
    pub non_zero_memory: i64,
}

fn container_requests(c: &Container) -> Resources {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(Resources::from_list)
        .unwrap_or_default()
}

fn non_zero(r: &Resources, c: &Container) -> (i64, i64) {
    let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let has = |k: &str| req.is_some_and(|m| m.contains_key(k));
    (
        if has("cpu") {
            r.milli_cpu
        } else {
            DEFAULT_MILLI_CPU_REQUEST
        },
        if has("memory") {
            r.memory
        } else {
            DEFAULT_MEMORY_REQUEST
        },
    )
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Computes a pod's requests as `resource.PodRequests` does: the sum of app containers and
/// restartable init containers (sidecars), raised to the largest requirement of any init
/// container phase (the init container plus the sidecars started before it), plus overhead.
pub fn pod_requests(spec: &PodSpec) -> PodRequests {
    let mut sum = Resources::default();
    let (mut nz_cpu, mut nz_mem) = (0i64, 0i64);
    for c in &spec.containers {
        let r = container_requests(c);
        let (a, b) = non_zero(&r, c);
        nz_cpu += a;
        nz_mem += b;
        sum.add(&r);
    }
    let mut sidecars = Resources::default();
    let (mut sc_cpu, mut sc_mem) = (0i64, 0i64);
    let mut init_max = Resources::default();
    let (mut init_cpu, mut init_mem) = (0i64, 0i64);
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        let (a, b) = non_zero(&r, c);
        if is_sidecar(c) {
            sidecars.add(&r);
            sc_cpu += a;
            sc_mem += b;
            sum.add(&r);
            nz_cpu += a;
            nz_mem += b;
            let mut phase = sidecars.clone();
            phase.max_with(&Resources::default());
            init_max.max_with(&phase);
            init_cpu = init_cpu.max(sc_cpu);
            init_mem = init_mem.max(sc_mem);
        } else {
            let mut phase = r.clone();
            phase.add(&sidecars);
            init_max.max_with(&phase);
            init_cpu = init_cpu.max(a + sc_cpu);
            init_mem = init_mem.max(b + sc_mem);
        }
    }
    sum.max_with(&init_max);
    nz_cpu = nz_cpu.max(init_cpu);
    nz_mem = nz_mem.max(init_mem);
    if let Some(overhead) = &spec.overhead {
        let o = Resources::from_list(overhead);
        nz_cpu += o.milli_cpu;
        nz_mem += o.memory;
        sum.add(&o);
    }
    PodRequests {
        requests: sum,
        non_zero_cpu: nz_cpu,
        non_zero_memory: nz_mem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    fn container(cpu: Option<&str>, mem: Option<&str>, sidecar: bool) -> Container {
        let mut req = BTreeMap::new();
        if let Some(c) = cpu {
            req.insert("cpu".to_owned(), Quantity(c.to_owned()));
        }
        if let Some(m) = mem {
            req.insert("memory".to_owned(), Quantity(m.to_owned()));
        }
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(req),
                ..Default::default()
            }),
            restart_policy: sidecar.then(|| "Always".to_owned()),
            ..Default::default()
        }
    }

    #[test]
    fn quantities_parse_as_upstream_rounds_them() {
        assert_eq!(parse_milli("100m"), 100);
        assert_eq!(parse_milli("2"), 2000);
        assert_eq!(parse_milli("1.5"), 1500);
        assert_eq!(parse_milli("0.0001"), 1);
        assert_eq!(parse_units("1Gi"), 1 << 30);
        assert_eq!(parse_units("1k"), 1000);
        assert_eq!(parse_units("1e3"), 1000);
        assert_eq!(parse_units("500m"), 1);
        assert_eq!(parse_units("bogus"), 0);
    }

    #[test]
    fn pod_requests_take_the_largest_init_phase_and_add_sidecars_and_overhead() {
        let spec = PodSpec {
            containers: vec![
                container(Some("1"), Some("1Gi"), false),
                container(None, None, false),
            ],
            init_containers: Some(vec![
                container(Some("500m"), None, true),
                container(Some("3"), Some("100Mi"), false),
            ]),
            overhead: Some(BTreeMap::from([(
                "cpu".to_owned(),
                Quantity("250m".into()),
            )])),
            ..Default::default()
        };
        let r = pod_requests(&spec);
        // app 1 + sidecar 0.5 = 1.5; init phase 3 + 0.5 = 3.5 → 3.5, plus overhead 0.25.
        assert_eq!(r.requests.milli_cpu, 3750);
        assert_eq!(r.requests.memory, 1 << 30);
        // Scoring: containers without requests count 100m / 200Mi.
        assert_eq!(r.non_zero_cpu, 3750);
        assert_eq!(r.non_zero_memory, (1 << 30) + 2 * DEFAULT_MEMORY_REQUEST);
    }
}
