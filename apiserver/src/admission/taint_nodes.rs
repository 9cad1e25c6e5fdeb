//! `TaintNodesByCondition` (upstream's `plugin/pkg/admission/nodetaint`): a new Node gets
//! the `node.kubernetes.io/not-ready:NoSchedule` taint, so nothing is scheduled onto it
//! before the node lifecycle controller has seen it Ready (and removed the taint).

use serde_json::{Map, Value, json};

use super::{Attributes, Lookup, MutatingAdmission, Operation};
use crate::error::Result;

/// The plugin.
pub struct TaintNodesByCondition;

/// The taint key upstream adds.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";

impl MutatingAdmission for TaintNodesByCondition {
    fn name(&self) -> &'static str {
        "TaintNodesByCondition"
    }

    fn admit(
        &self,
        _lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if a.operation != Operation::Create || !a.is_core("nodes") || !a.subresource.is_empty() {
            return Ok(());
        }
        if let Some(node) = obj {
            add_not_ready_taint(node);
        }
        Ok(())
    }
}

/// Adds the not-ready NoSchedule taint unless the node already has it.
fn add_not_ready_taint(node: &mut Map<String, Value>) {
    let spec = node
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let taints = spec
        .entry("taints")
        .or_insert_with(|| Value::Array(Vec::new()));
    if taints.is_null() {
        *taints = Value::Array(Vec::new());
    }
    let Some(taints) = taints.as_array_mut() else {
        return;
    };
    let present = taints.iter().any(|t| {
        t.get("key").and_then(Value::as_str) == Some(NOT_READY)
            && t.get("effect").and_then(Value::as_str) == Some("NoSchedule")
    });
    if !present {
        taints.push(json!({"key": NOT_READY, "effect": "NoSchedule"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_the_taint_once() {
        let mut node = json!({"metadata": {"name": "n"}});
        let m = node.as_object_mut().unwrap();
        add_not_ready_taint(m);
        add_not_ready_taint(m);
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": NOT_READY, "effect": "NoSchedule"}])
        );
        let mut other =
            json!({"spec": {"taints": [{"key": "a", "value": "b", "effect": "NoExecute"}]}});
        add_not_ready_taint(other.as_object_mut().unwrap());
        assert_eq!(other["spec"]["taints"].as_array().unwrap().len(), 2);
    }
}
