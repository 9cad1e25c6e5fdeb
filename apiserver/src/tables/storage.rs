//! `storage.k8s.io` printers: storage classes, volume attributes classes, volume attachments,
//! CSI drivers, CSI nodes and CSI storage capacities.

use super::{AGE, Env, J, NAME, Printer, Row, age, cells, col, desc, name, quantity};

/// Storage classes: `Name Provisioner ReclaimPolicy VolumeBindingMode AllowVolumeExpansion Age`;
/// the default class's name carries ` (default)`.
pub(super) const STORAGE_CLASSES: Printer = Printer::new(
    &[
        NAME,
        col("Provisioner", "string", desc::SC_PROVISIONER),
        col("ReclaimPolicy", "string", desc::SC_RECLAIM),
        col("VolumeBindingMode", "string", desc::SC_BINDING_MODE),
        col("AllowVolumeExpansion", "string", desc::SC_EXPANSION),
        AGE,
    ],
    storage_class,
);

/// Whether an annotation marks the object as its kind's default (`"true"`).
fn annotated_default(o: J<'_>, keys: &[&str]) -> bool {
    let annotations = o.path(&["metadata", "annotations"]);
    keys.iter().any(|k| annotations.get(k).str() == "true")
}

fn storage_class(env: &Env<'_>, o: J<'_>) -> Row {
    let mut n = name(o);
    if annotated_default(
        o,
        &[
            "storageclass.kubernetes.io/is-default-class",
            "storageclass.beta.kubernetes.io/is-default-class",
        ],
    ) {
        n.push_str(" (default)");
    }
    Row::new(cells![
        n,
        o.get("provisioner").str(),
        o.get("reclaimPolicy").opt_str().unwrap_or("Delete"),
        o.get("volumeBindingMode").opt_str().unwrap_or("Immediate"),
        o.get("allowVolumeExpansion").bool(),
        age(env, o),
    ])
}

/// Volume attributes classes: `Name DriverName Age`.
pub(super) const VOLUME_ATTRIBUTES_CLASSES: Printer = Printer::new(
    &[NAME, col("DriverName", "string", desc::VAC_DRIVER), AGE],
    volume_attributes_class,
);

fn volume_attributes_class(env: &Env<'_>, o: J<'_>) -> Row {
    let mut n = name(o);
    if annotated_default(o, &["storage.kubernetes.io/is-default-class"]) {
        n.push_str(" (default)");
    }
    Row::new(cells![n, o.get("driverName").str(), age(env, o)])
}

/// Volume attachments: `Name Attacher PV Node Attached Age`.
pub(super) const VOLUME_ATTACHMENTS: Printer = Printer::new(
    &[
        NAME,
        super::Column {
            format: "name",
            ..col("Attacher", "string", desc::VA_SPEC_ATTACHER)
        },
        col("PV", "string", desc::VA_SOURCE_PV),
        col("Node", "string", desc::VA_SPEC_NODE),
        col("Attached", "boolean", desc::VA_STATUS_ATTACHED),
        AGE,
    ],
    volume_attachment,
);

fn volume_attachment(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    Row::new(cells![
        name(o),
        spec.get("attacher").str(),
        spec.path(&["source", "persistentVolumeName"]).str(),
        spec.get("nodeName").str(),
        o.path(&["status", "attached"]).bool(),
        age(env, o),
    ])
}

/// CSI drivers: `Name AttachRequired PodInfoOnMount StorageCapacity TokenRequests
/// RequiresRepublish Modes Age`.
pub(super) const CSI_DRIVERS: Printer = Printer::new(
    &[
        NAME,
        col("AttachRequired", "boolean", desc::CSID_ATTACH),
        col("PodInfoOnMount", "boolean", desc::CSID_POD_INFO),
        col("StorageCapacity", "boolean", desc::CSID_STORAGE_CAPACITY),
        col("TokenRequests", "string", desc::CSID_TOKEN_REQUESTS),
        col("RequiresRepublish", "boolean", desc::CSID_REPUBLISH),
        col("Modes", "string", desc::CSID_MODES),
        AGE,
    ],
    csi_driver,
);

fn csi_driver(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let modes: Vec<&str> = spec
        .get("volumeLifecycleModes")
        .items()
        .map(J::str)
        .collect();
    let modes = if modes.is_empty() {
        "<none>".to_owned()
    } else {
        modes.join(",")
    };
    let token_requests = if spec.get("tokenRequests").is_set() {
        spec.get("tokenRequests")
            .items()
            .map(|t| t.get("audience").str())
            .collect::<Vec<_>>()
            .join(",")
    } else {
        "<unset>".to_owned()
    };
    Row::new(cells![
        name(o),
        spec.get("attachRequired").opt_bool().unwrap_or(true),
        spec.get("podInfoOnMount").bool(),
        spec.get("storageCapacity").bool(),
        token_requests,
        spec.get("requiresRepublish").bool(),
        modes,
        age(env, o),
    ])
}

/// CSI nodes: `Name Drivers Age`.
pub(super) const CSI_NODES: Printer = Printer::new(
    &[
        NAME,
        col(
            "Drivers",
            "integer",
            "Drivers indicates the number of CSI drivers registered on the node",
        ),
        AGE,
    ],
    csi_node,
);

fn csi_node(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        o.path(&["spec", "drivers"]).len(),
        age(env, o)
    ])
}

/// CSI storage capacities: `Name StorageClassName Capacity`.
pub(super) const CSI_STORAGE_CAPACITIES: Printer = Printer::new(
    &[
        NAME,
        col("StorageClassName", "string", desc::CSISC_CLASS),
        col("Capacity", "string", desc::CSISC_CAPACITY),
    ],
    csi_storage_capacity,
);

fn csi_storage_capacity(_: &Env<'_>, o: J<'_>) -> Row {
    let capacity = if o.get("capacity").is_set() {
        quantity(o.get("capacity"))
    } else {
        "<unset>".to_owned()
    };
    Row::new(cells![name(o), o.get("storageClassName").str(), capacity])
}
