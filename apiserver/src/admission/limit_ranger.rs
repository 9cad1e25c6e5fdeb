//! `LimitRanger` (upstream's `plugin/pkg/admission/limitranger`): the LimitRanges of a
//! namespace give new pods' containers default requests and limits (recorded in the
//! `kubernetes.io/limit-ranger` annotation), and refuse pods and claims outside their
//! `min`, `max` and `maxLimitRequestRatio`, with upstream's messages.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Attributes, Lookup, MutatingAdmission, Operation, ValidatingAdmission, forbidden};
use crate::error::Result;

/// The plugin.
pub struct LimitRanger;

const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// A quantity in nano-units (exact for every quantity a resource list holds in practice).
pub(crate) fn nano(s: &str) -> Option<i128> {
    let s = s.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    // (multiplier numerator, power of ten) relative to one unit.
    let (mult, pow10): (i128, i32) = match suffix {
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
        e if e.starts_with(['e', 'E']) => (1, e[1..].parse().ok()?),
        _ => return None,
    };
    let digits: String = format!("{int}{frac}");
    let mut value: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    // value × 10^(pow10 + 9 − len(frac)) × mult, rounding up below one nano-unit.
    let mut exp = pow10 + 9 - i32::try_from(frac.len()).ok()?;
    value = value.checked_mul(mult)?;
    while exp > 0 {
        value = value.checked_mul(10)?;
        exp -= 1;
    }
    while exp < 0 {
        value = (value + 9) / 10;
        exp += 1;
    }
    Some(if negative { -value } else { value })
}

/// The canonical text of a quantity (upstream's `Quantity.String()`).
fn display(v: &Value) -> String {
    let raw = quantity_text(v);
    crate::quantity::canonical(&raw).unwrap_or(raw)
}

fn quantity_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn list(v: Option<&Value>) -> BTreeMap<String, Value> {
    v.and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// One `spec.limits` item with upstream's LimitRange defaults applied.
struct Item {
    kind: String,
    min: BTreeMap<String, Value>,
    max: BTreeMap<String, Value>,
    default: BTreeMap<String, Value>,
    default_request: BTreeMap<String, Value>,
    ratio: BTreeMap<String, Value>,
}

fn items(lookup: &Lookup<'_>, namespace: &str) -> Vec<Item> {
    let mut out = Vec::new();
    for lr in lookup.list(&format!("/registry/core/limitranges/{namespace}/")) {
        let limits = lr
            .get("spec")
            .and_then(|s| s.get("limits"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for l in limits {
            let mut item = Item {
                kind: l
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                min: list(l.get("min")),
                max: list(l.get("max")),
                default: list(l.get("default")),
                default_request: list(l.get("defaultRequest")),
                ratio: list(l.get("maxLimitRequestRatio")),
            };
            if item.kind == "Container" {
                // SetDefaults_LimitRangeItem: default ← max; defaultRequest ← default, min.
                for (k, v) in &item.max {
                    item.default.entry(k.clone()).or_insert_with(|| v.clone());
                }
                for (k, v) in item.default.iter().chain(&item.min) {
                    item.default_request
                        .entry(k.clone())
                        .or_insert_with(|| v.clone());
                }
            }
            out.push(item);
        }
    }
    out
}

fn container_lists() -> [(&'static str, &'static str); 2] {
    [
        ("containers", "container"),
        ("initContainers", "init container"),
    ]
}

impl MutatingAdmission for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    fn admit(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if !a.is_core("pods") || !a.subresource.is_empty() || a.operation != Operation::Create {
            return Ok(());
        }
        let Some(pod) = obj else {
            return Ok(());
        };
        let items = items(lookup, a.namespace);
        if items.is_empty() {
            return Ok(());
        }
        let mut limits = BTreeMap::new();
        let mut requests = BTreeMap::new();
        for item in items.iter().filter(|i| i.kind == "Container") {
            limits.extend(item.default.clone());
            requests.extend(item.default_request.clone());
        }
        let mut notes = Vec::new();
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        for (list, label) in container_lists() {
            let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
                continue;
            };
            for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                let name = c
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let resources = c.entry("resources").or_insert_with(|| json!({}));
                if !resources.is_object() {
                    *resources = json!({});
                }
                let Some(resources) = resources.as_object_mut() else {
                    continue;
                };
                for (field, defaults, word) in [
                    ("requests", &requests, "request"),
                    ("limits", &limits, "limit"),
                ] {
                    let set = resources.entry(field).or_insert_with(|| json!({}));
                    if !set.is_object() {
                        *set = json!({});
                    }
                    let Some(set) = set.as_object_mut() else {
                        continue;
                    };
                    let mut added: Vec<&str> = Vec::new();
                    for (k, v) in defaults {
                        if !set.contains_key(k) {
                            set.insert(k.clone(), json!(display(v)));
                            added.push(k);
                        }
                    }
                    if !added.is_empty() {
                        added.sort_unstable();
                        notes.push(format!("{} {word} for {label} {name}", added.join(", ")));
                    }
                }
                for field in ["requests", "limits"] {
                    if resources
                        .get(field)
                        .and_then(Value::as_object)
                        .is_some_and(Map::is_empty)
                    {
                        resources.remove(field);
                    }
                }
            }
        }
        if notes.is_empty() {
            return Ok(());
        }
        let meta = pod.entry("metadata").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            let ann = meta.entry("annotations").or_insert_with(|| json!({}));
            if !ann.is_object() {
                *ann = json!({});
            }
            if let Some(ann) = ann.as_object_mut() {
                ann.insert(
                    ANNOTATION.into(),
                    json!(format!("LimitRanger plugin set: {}", notes.join("; "))),
                );
            }
        }
        Ok(())
    }
}

/// Requests and limits of one container, or of a whole pod.
struct Usage {
    requests: BTreeMap<String, Value>,
    limits: BTreeMap<String, Value>,
}

fn container_usage(c: &Value) -> Usage {
    let res = c.get("resources");
    Usage {
        requests: list(res.and_then(|r| r.get("requests"))),
        limits: list(res.and_then(|r| r.get("limits"))),
    }
}

/// The pod's effective usage: the sum over containers, raised to the largest init
/// container (upstream's pod requests/limits for LimitRange).
fn pod_usage(pod: &Map<String, Value>) -> Usage {
    let spec = pod.get("spec");
    let containers = |list: &str| -> Vec<Usage> {
        spec.and_then(|s| s.get(list))
            .and_then(Value::as_array)
            .map(|v| v.iter().map(container_usage).collect())
            .unwrap_or_default()
    };
    let combine = |pick: fn(&Usage) -> &BTreeMap<String, Value>| {
        let mut sums: BTreeMap<String, i128> = BTreeMap::new();
        for u in containers("containers") {
            for (k, v) in pick(&u) {
                *sums.entry(k.clone()).or_default() += nano(&quantity_text(v)).unwrap_or(0);
            }
        }
        for u in containers("initContainers") {
            for (k, v) in pick(&u) {
                let n = nano(&quantity_text(v)).unwrap_or(0);
                let e = sums.entry(k.clone()).or_default();
                *e = (*e).max(n);
            }
        }
        sums.into_iter()
            .map(|(k, n)| (k, json!(from_nano(n))))
            .collect::<BTreeMap<_, _>>()
    };
    Usage {
        requests: combine(|u| &u.requests),
        limits: combine(|u| &u.limits),
    }
}

/// A nano-unit amount as a quantity string.
fn from_nano(n: i128) -> String {
    if n % 1_000_000_000 == 0 {
        format!("{}", n / 1_000_000_000)
    } else if n % 1_000_000 == 0 {
        format!("{}m", n / 1_000_000)
    } else {
        format!("{n}n")
    }
}

/// Upstream's comparisons use milli-units unless the bound is too large for them.
fn observed(v: Option<&Value>) -> i128 {
    v.and_then(|v| nano(&quantity_text(v))).unwrap_or(0)
}

fn check(kind: &str, item: &Item, usage: &Usage, errors: &mut Vec<String>) {
    for (res, bound) in &item.min {
        let b = display(bound);
        let enforced = observed(Some(bound));
        let (req, lim) = (usage.requests.get(res), usage.limits.get(res));
        match req {
            None => errors.push(format!(
                "minimum {res} usage per {kind} is {b}.  No request is specified"
            )),
            Some(r) if observed(Some(r)) < enforced => errors.push(format!(
                "minimum {res} usage per {kind} is {b}, but request is {}",
                display(r)
            )),
            _ => {
                if let Some(l) = lim.filter(|l| observed(Some(l)) < enforced) {
                    errors.push(format!(
                        "minimum {res} usage per {kind} is {b}, but limit is {}",
                        display(l)
                    ));
                }
            }
        }
    }
    for (res, bound) in &item.max {
        let b = display(bound);
        let enforced = observed(Some(bound));
        let (req, lim) = (usage.requests.get(res), usage.limits.get(res));
        match lim {
            None => errors.push(format!(
                "maximum {res} usage per {kind} is {b}.  No limit is specified"
            )),
            Some(l) if observed(Some(l)) > enforced => errors.push(format!(
                "maximum {res} usage per {kind} is {b}, but limit is {}",
                display(l)
            )),
            _ => {
                if let Some(r) = req.filter(|r| observed(Some(r)) > enforced) {
                    errors.push(format!(
                        "maximum {res} usage per {kind} is {b}, but request is {}",
                        display(r)
                    ));
                }
            }
        }
    }
    for (res, bound) in &item.ratio {
        let b = display(bound);
        let req = observed(usage.requests.get(res));
        let lim = observed(usage.limits.get(res));
        if req == 0 {
            errors.push(format!(
                "{res} max limit to request ratio per {kind} is {b}, but no request is specified or request is 0"
            ));
            continue;
        }
        if lim == 0 {
            errors.push(format!(
                "{res} max limit to request ratio per {kind} is {b}, but no limit is specified or limit is 0"
            ));
            continue;
        }
        #[allow(clippy::cast_precision_loss)]
        let ratio = lim as f64 / req as f64;
        #[allow(clippy::cast_precision_loss)]
        let max = observed(Some(bound)) as f64 / 1e9;
        if ratio > max {
            errors.push(format!(
                "{res} max limit to request ratio per {kind} is {b}, but provided ratio is {ratio:.6}"
            ));
        }
    }
}

/// Upstream's `utilerrors.NewAggregate` text.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

impl ValidatingAdmission for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    fn validate(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let pods = a.is_core("pods");
        let claims = a.is_core("persistentvolumeclaims");
        if !(pods || claims)
            || !a.subresource.is_empty()
            || !matches!(a.operation, Operation::Create | Operation::Update)
            || (pods && a.operation == Operation::Update)
        {
            return Ok(());
        }
        let Some(o) = obj else {
            return Ok(());
        };
        let mut errors = Vec::new();
        for item in items(lookup, a.namespace) {
            match (item.kind.as_str(), pods) {
                ("Container", true) => {
                    for (list, _) in container_lists() {
                        for c in o
                            .get("spec")
                            .and_then(|s| s.get(list))
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            check("Container", &item, &container_usage(c), &mut errors);
                        }
                    }
                }
                ("Pod", true) => check("Pod", &item, &pod_usage(o), &mut errors),
                ("PersistentVolumeClaim", false) => {
                    let res = o.get("spec").and_then(|s| s.get("resources"));
                    let usage = Usage {
                        requests: list(res.and_then(|r| r.get("requests"))),
                        limits: list(res.and_then(|r| r.get("limits"))),
                    };
                    let claim = Item {
                        kind: item.kind.clone(),
                        min: item.min.clone(),
                        max: item.max.clone(),
                        default: BTreeMap::new(),
                        default_request: BTreeMap::new(),
                        ratio: BTreeMap::new(),
                    };
                    check_claim(&claim, &usage, &mut errors);
                }
                _ => {}
            }
        }
        if errors.is_empty() {
            return Ok(());
        }
        Err(forbidden(a, obj, aggregate(&errors)))
    }
}

/// PVC bounds: `min`/`max` against `spec.resources.requests` (upstream's
/// `PersistentVolumeClaimValidateLimitFunc`).
fn check_claim(item: &Item, usage: &Usage, errors: &mut Vec<String>) {
    let kind = "PersistentVolumeClaim";
    for (res, bound) in &item.min {
        match usage.requests.get(res) {
            None => errors.push(format!(
                "minimum {res} usage per {kind} is {}.  No request is specified",
                display(bound)
            )),
            Some(r) if observed(Some(r)) < observed(Some(bound)) => errors.push(format!(
                "minimum {res} usage per {kind} is {}, but request is {}",
                display(bound),
                display(r)
            )),
            _ => {}
        }
    }
    for (res, bound) in &item.max {
        match usage.requests.get(res) {
            None => errors.push(format!(
                "maximum {res} usage per {kind} is {}.  No request is specified",
                display(bound)
            )),
            Some(r) if observed(Some(r)) > observed(Some(bound)) => errors.push(format!(
                "maximum {res} usage per {kind} is {}, but request is {}",
                display(bound),
                display(r)
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_compare_in_nano_units() {
        assert_eq!(nano("100m"), Some(100_000_000));
        assert_eq!(nano("1"), Some(1_000_000_000));
        assert_eq!(nano("1.5"), Some(1_500_000_000));
        assert_eq!(nano("1Ki"), Some(1024 * 1_000_000_000));
        assert_eq!(nano("2e3"), Some(2_000 * 1_000_000_000));
        assert!(nano("256Mi") < nano("1Gi"));
        assert_eq!(nano("abc"), None);
        assert_eq!(from_nano(1_500_000_000), "1500m");
    }

    #[test]
    fn several_errors_are_listed_as_upstream() {
        assert_eq!(aggregate(&["a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into()]), "[a, b]");
    }
}
