//! Filter plugins, one module each, in the order upstream's default profile runs them.

pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod taint_toleration;

#[cfg(test)]
pub(crate) mod testutil {
    //! Builders for plugin tests.
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        Container, Node, NodeSpec, NodeStatus, Pod, PodSpec, ResourceRequirements, Taint,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use crate::cache::NodeInfo;

    /// A node with `cpu` allocatable, 110 pods, labels and taints.
    pub(crate) fn node(name: &str, cpu: &str, labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity(cpu.into())),
                    ("memory".to_owned(), Quantity("8Gi".into())),
                    ("pods".to_owned(), Quantity("110".into())),
                ])),
                ..Default::default()
            }),
        }
    }

    /// A NodeInfo for [`node`].
    pub(crate) fn info(
        name: &str,
        cpu: &str,
        labels: &[(&str, &str)],
        taints: Vec<Taint>,
    ) -> NodeInfo {
        NodeInfo::from_node(&node(name, cpu, labels, taints))
    }

    /// A pod requesting `cpu` with labels.
    pub(crate) fn pod(name: &str, cpu: &str, labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(BTreeMap::from([("cpu".to_owned(), Quantity(cpu.into()))])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A taint.
    pub(crate) fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }
}
