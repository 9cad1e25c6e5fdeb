//! `apps/v1` printers: deployments, replica sets, daemon sets, stateful sets, controller revisions.

use super::{
    AGE, CONTAINERS, Env, IMAGES, J, NAME, Printer, Row, age, cells, col, container_cells, desc,
    format_label_selector, format_labels, label_selector_string, name, wide,
};

/// Deployments: `Name Ready Up-to-date Available Age`; wide `Containers Images Selector`.
pub(super) const DEPLOYMENTS: Printer = Printer::new(
    &[
        NAME,
        col("Ready", "string", "Number of the pod with ready state"),
        col("Up-to-date", "string", desc::DEPLOY_STATUS_UPDATED),
        col("Available", "string", desc::DEPLOY_STATUS_AVAILABLE),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", "string", desc::DEPLOY_SPEC_SELECTOR),
    ],
    deployment,
);

fn deployment(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let status = o.get("status");
    let desired = spec.get("replicas").opt_int().unwrap_or(1);
    let (names, images) = container_cells(spec.path(&["template", "spec", "containers"]));
    // Upstream prints the selector itself here: empty (not `<none>`) when it selects nothing.
    let selector =
        label_selector_string(spec.get("selector")).unwrap_or_else(|()| "<invalid>".to_owned());
    Row::new(cells![
        name(o),
        format!("{}/{desired}", status.get("readyReplicas").int()),
        status.get("updatedReplicas").int(),
        status.get("availableReplicas").int(),
        age(env, o),
        names,
        images,
        selector,
    ])
}

/// Replica sets: `Name Desired Current Ready Age`; wide `Containers Images Selector`.
pub(super) const REPLICA_SETS: Printer = Printer::new(
    &[
        NAME,
        col("Desired", "integer", desc::RS_SPEC_REPLICAS),
        col("Current", "integer", desc::RS_STATUS_REPLICAS),
        col("Ready", "integer", desc::RS_STATUS_READY),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", "string", desc::RS_SPEC_SELECTOR),
    ],
    replica_set,
);

fn replica_set(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let status = o.get("status");
    let (names, images) = container_cells(spec.path(&["template", "spec", "containers"]));
    Row::new(cells![
        name(o),
        spec.get("replicas").opt_int().unwrap_or(1),
        status.get("replicas").int(),
        status.get("readyReplicas").int(),
        age(env, o),
        names,
        images,
        format_label_selector(spec.get("selector")),
    ])
}

/// Daemon sets: `Name Desired Current Ready Up-to-date Available Node Selector Age`; wide
/// `Containers Images Selector`.
pub(super) const DAEMON_SETS: Printer = Printer::new(
    &[
        NAME,
        col("Desired", "integer", desc::DS_STATUS_DESIRED),
        col("Current", "integer", desc::DS_STATUS_CURRENT),
        col("Ready", "integer", desc::DS_STATUS_READY),
        col("Up-to-date", "integer", desc::DS_STATUS_UPDATED),
        col("Available", "integer", desc::DS_STATUS_AVAILABLE),
        col("Node Selector", "string", desc::POD_SPEC_NODE_SELECTOR),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", "string", desc::DS_SPEC_SELECTOR),
    ],
    daemon_set,
);

fn daemon_set(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let status = o.get("status");
    let pod_spec = spec.path(&["template", "spec"]);
    let (names, images) = container_cells(pod_spec.get("containers"));
    Row::new(cells![
        name(o),
        status.get("desiredNumberScheduled").int(),
        status.get("currentNumberScheduled").int(),
        status.get("numberReady").int(),
        status.get("updatedNumberScheduled").int(),
        status.get("numberAvailable").int(),
        format_labels(pod_spec.get("nodeSelector")),
        age(env, o),
        names,
        images,
        format_label_selector(spec.get("selector")),
    ])
}

/// Stateful sets: `Name Ready Age`; wide `Containers Images`.
pub(super) const STATEFUL_SETS: Printer = Printer::new(
    &[
        NAME,
        col("Ready", "string", "Number of the pod with ready state"),
        AGE,
        CONTAINERS,
        IMAGES,
    ],
    stateful_set,
);

fn stateful_set(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let (names, images) = container_cells(spec.path(&["template", "spec", "containers"]));
    Row::new(cells![
        name(o),
        format!(
            "{}/{}",
            o.path(&["status", "readyReplicas"]).int(),
            spec.get("replicas").opt_int().unwrap_or(1)
        ),
        age(env, o),
        names,
        images,
    ])
}

/// Controller revisions: `Name Controller Revision Age`.
pub(super) const CONTROLLER_REVISIONS: Printer = Printer::new(
    &[
        NAME,
        col("Controller", "string", "Controller of the object"),
        col("Revision", "string", desc::CR_REVISION),
        AGE,
    ],
    controller_revision,
);

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → core); `None` when malformed.
pub(super) fn api_group(api_version: &str) -> Option<&str> {
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [_] => Some(""),
        [group, _] => Some(group),
        _ => None,
    }
}

/// `kind.group/name` in lower case, as `formatResourceName` prints a controller.
fn controller_name(o: J<'_>) -> String {
    let Some(owner) = o
        .path(&["metadata", "ownerReferences"])
        .items()
        .find(|r| r.get("controller").bool())
    else {
        return "<none>".to_owned();
    };
    let name = owner.get("name").str();
    let kind = owner.get("kind").str();
    let group = api_group(owner.get("apiVersion").str()).unwrap_or("");
    if kind.is_empty() && group.is_empty() {
        return name.to_owned();
    }
    let group_kind = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    format!("{}/{name}", group_kind.to_lowercase())
}

fn controller_revision(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        controller_name(o),
        o.get("revision").int(),
        age(env, o)
    ])
}
