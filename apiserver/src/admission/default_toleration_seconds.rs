//! `DefaultTolerationSeconds` (upstream's `plugin/pkg/admission/defaulttolerationseconds`):
//! a pod that does not tolerate the `node.kubernetes.io/not-ready` and
//! `node.kubernetes.io/unreachable` NoExecute taints gets tolerations of them for 300
//! seconds, so it is evicted five minutes after its node fails.

use serde_json::{Map, Value, json};

use super::{Attributes, Lookup, MutatingAdmission, Operation};
use crate::error::Result;

/// The plugin.
pub struct DefaultTolerationSeconds;

/// Upstream's `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds` defaults.
pub const DEFAULT_SECONDS: i64 = 300;

const NOT_READY: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Whether `tolerations` already tolerate the NoExecute taint `key`.
fn tolerates(tolerations: &[Value], key: &str) -> bool {
    tolerations.iter().any(|t| {
        let k = t.get("key").and_then(Value::as_str).unwrap_or("");
        let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
        (k == key || k.is_empty()) && (effect == "NoExecute" || effect.is_empty())
    })
}

impl MutatingAdmission for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    fn admit(
        &self,
        _lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if !a.is_core("pods")
            || !a.subresource.is_empty()
            || !matches!(a.operation, Operation::Create | Operation::Update)
        {
            return Ok(());
        }
        let Some(spec) = obj
            .and_then(|o| o.get_mut("spec"))
            .and_then(Value::as_object_mut)
        else {
            return Ok(());
        };
        let entry = spec.entry("tolerations").or_insert_with(|| json!([]));
        if entry.is_null() {
            *entry = json!([]);
        }
        let Some(list) = entry.as_array_mut() else {
            return Ok(());
        };
        for key in [NOT_READY, UNREACHABLE] {
            if !tolerates(list, key) {
                list.push(json!({
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_SECONDS,
                }));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toleration_of_everything_needs_no_defaults() {
        let all = vec![json!({"operator": "Exists"})];
        assert!(tolerates(&all, NOT_READY) && tolerates(&all, UNREACHABLE));
        let other = vec![json!({"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"})];
        assert!(!tolerates(&other, NOT_READY));
    }
}
