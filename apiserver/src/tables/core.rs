//! Core (`v1`) printers other than the pod's, and the `events.k8s.io` event printer (upstream
//! serves both event APIs from one storage, so both print alike).

use std::collections::BTreeSet;

use super::{
    AGE, CONTAINERS, Env, IMAGES, J, NAME, Printer, Row, age, cells, col, container_cells,
    deleting, desc, format_labels, name, quantity, since, timestamp, wide,
};

/// Pod templates: `Name Containers Images Pod Labels`.
pub(super) const POD_TEMPLATES: Printer = Printer::new(
    &[
        NAME,
        col(
            "Containers",
            "string",
            "Names of each container in the template.",
        ),
        col(
            "Images",
            "string",
            "Images referenced by each container in the template.",
        ),
        col("Pod Labels", "string", "The labels for the pod template."),
    ],
    pod_template,
);

fn pod_template(_: &Env<'_>, o: J<'_>) -> Row {
    let template = o.get("template");
    let (names, images) = container_cells(template.path(&["spec", "containers"]));
    Row::new(cells![
        name(o),
        names,
        images,
        format_labels(template.path(&["metadata", "labels"])),
    ])
}

/// Replication controllers: `Name Desired Current Ready Age`; wide `Containers Images Selector`.
pub(super) const REPLICATION_CONTROLLERS: Printer = Printer::new(
    &[
        NAME,
        col("Desired", "integer", desc::RC_SPEC_REPLICAS),
        col("Current", "integer", desc::RC_STATUS_REPLICAS),
        col("Ready", "integer", desc::RC_STATUS_READY),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", "string", desc::RC_SPEC_SELECTOR),
    ],
    replication_controller,
);

fn replication_controller(env: &Env<'_>, o: J<'_>) -> Row {
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
        format_labels(spec.get("selector")),
    ])
}

/// Services: `Name Type Cluster-IP External-IP Port(s) Age`; wide `Selector`.
pub(super) const SERVICES: Printer = Printer::new(
    &[
        NAME,
        col("Type", "string", desc::SVC_SPEC_TYPE),
        col("Cluster-IP", "string", desc::SVC_SPEC_CLUSTER_IP),
        col("External-IP", "string", desc::SVC_SPEC_EXTERNAL_IPS),
        col("Port(s)", "string", desc::SVC_SPEC_PORTS),
        AGE,
        wide("Selector", "string", desc::SVC_SPEC_SELECTOR),
    ],
    service,
);

/// `loadBalancerStatusStringer` in its wide form (the server prints wide): the sorted, distinct
/// ingress IPs (or hostnames) joined by commas.
pub(super) fn load_balancer_ingress(status: J<'_>) -> String {
    let set: BTreeSet<&str> = status
        .get("ingress")
        .items()
        .filter_map(|i| {
            let ip = i.get("ip").str();
            let host = i.get("hostname").str();
            if !ip.is_empty() {
                Some(ip)
            } else if !host.is_empty() {
                Some(host)
            } else {
                None
            }
        })
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// `getServiceExternalIP`.
fn service_external_ip(svc: J<'_>) -> String {
    let spec = svc.get("spec");
    let external: Vec<&str> = spec.get("externalIPs").items().map(J::str).collect();
    match spec.get("type").str() {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".to_owned()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let lb = load_balancer_ingress(svc.path(&["status", "loadBalancer"]));
            if !external.is_empty() {
                let mut all: Vec<&str> = Vec::new();
                if !lb.is_empty() {
                    all.extend(lb.split(','));
                }
                all.extend(external);
                all.join(",")
            } else if !lb.is_empty() {
                lb
            } else {
                "<pending>".to_owned()
            }
        }
        "ExternalName" => spec.get("externalName").str().to_owned(),
        _ => "<unknown>".to_owned(),
    }
}

/// `makePortString`: `port/PROTO` or `port:nodePort/PROTO`, comma-separated.
pub(super) fn service_ports(ports: J<'_>) -> String {
    ports
        .items()
        .map(|p| {
            let port = p.get("port").int();
            let protocol = p.get("protocol").opt_str().unwrap_or("TCP");
            let node_port = p.get("nodePort").int();
            if node_port > 0 {
                format!("{port}:{node_port}/{protocol}")
            } else {
                format!("{port}/{protocol}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn service(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let cluster_ip = spec
        .get("clusterIPs")
        .items()
        .next()
        .map(J::str)
        .or_else(|| spec.get("clusterIP").opt_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let mut ports = service_ports(spec.get("ports"));
    if ports.is_empty() {
        ports = "<none>".to_owned();
    }
    Row::new(cells![
        name(o),
        spec.get("type").str(),
        cluster_ip,
        service_external_ip(o),
        ports,
        age(env, o),
        format_labels(spec.get("selector")),
    ])
}

/// Endpoints: `Name Endpoints Age`.
pub(super) const ENDPOINTS: Printer = Printer::new(
    &[NAME, col("Endpoints", "string", desc::EP_SUBSETS), AGE],
    endpoints,
);

/// `net.JoinHostPort`.
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `formatEndpoints` (all ports): up to three `ip:port`, then `+ N more...`.
fn format_endpoints(o: J<'_>) -> String {
    const MAX: usize = 3;
    let subsets = o.get("subsets");
    if subsets.len() == 0 {
        return "<none>".to_owned();
    }
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for ss in subsets.items() {
        let addresses: Vec<J<'_>> = ss.get("addresses").items().collect();
        if ss.get("ports").len() == 0 {
            // Headless services may have no ports.
            count += addresses.len();
            for a in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(a.get("ip").str().to_owned());
            }
            continue;
        }
        for port in ss.get("ports").items() {
            count += addresses.len();
            for a in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(a.get("ip").str(), port.get("port").int()));
            }
        }
    }
    let ret = list.join(",");
    if more {
        format!("{ret} + {} more...", count - MAX)
    } else {
        ret
    }
}

fn endpoints(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![name(o), format_endpoints(o), age(env, o)])
}

/// Nodes: `Name Status Roles Age Version`; wide `Internal-IP External-IP OS-Image
/// Kernel-Version Container-Runtime`.
pub(super) const NODES: Printer = Printer::new(
    &[
        NAME,
        col("Status", "string", "The status of the node"),
        col("Roles", "string", "The roles of the node"),
        AGE,
        col("Version", "string", desc::NODE_INFO_KUBELET),
        wide("Internal-IP", "string", desc::NODE_STATUS_ADDRESSES),
        wide("External-IP", "string", desc::NODE_STATUS_ADDRESSES),
        wide("OS-Image", "string", desc::NODE_INFO_OS_IMAGE),
        wide("Kernel-Version", "string", desc::NODE_INFO_KERNEL),
        wide("Container-Runtime", "string", desc::NODE_INFO_RUNTIME),
    ],
    node,
);

/// `findNodeRoles`: `node-role.kubernetes.io/<role>` label keys and `kubernetes.io/role` values.
fn node_roles(node: J<'_>) -> Vec<String> {
    let mut roles = BTreeSet::new();
    for (k, v) in node.path(&["metadata", "labels"]).entries() {
        if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.insert(role.to_owned());
            }
        } else if k == "kubernetes.io/role" && !v.str().is_empty() {
            roles.insert(v.str().to_owned());
        }
    }
    roles.into_iter().collect()
}

fn node_address(node: J<'_>, kind: &str) -> String {
    node.path(&["status", "addresses"])
        .items()
        .find(|a| a.get("type").str() == kind)
        .map_or_else(
            || "<none>".to_owned(),
            |a| a.get("address").str().to_owned(),
        )
}

fn node(env: &Env<'_>, o: J<'_>) -> Row {
    let status = o.get("status");
    // The last Ready condition wins (upstream builds a map by type).
    let ready = status
        .get("conditions")
        .items()
        .filter(|c| c.get("type").str() == "Ready")
        .last();
    let mut states: Vec<String> = match ready {
        Some(c) if c.get("status").str() == "True" => vec!["Ready".to_owned()],
        Some(_) => vec!["NotReady".to_owned()],
        None => vec!["Unknown".to_owned()],
    };
    if o.path(&["spec", "unschedulable"]).bool() {
        states.push("SchedulingDisabled".to_owned());
    }
    let mut roles = node_roles(o).join(",");
    if roles.is_empty() {
        roles = "<none>".to_owned();
    }
    let info = status.get("nodeInfo");
    let unknown = |s: &str| {
        if s.is_empty() {
            "<unknown>".to_owned()
        } else {
            s.to_owned()
        }
    };
    Row::new(cells![
        name(o),
        states.join(","),
        roles,
        age(env, o),
        info.get("kubeletVersion").str(),
        node_address(o, "InternalIP"),
        node_address(o, "ExternalIP"),
        unknown(info.get("osImage").str()),
        unknown(info.get("kernelVersion").str()),
        unknown(info.get("containerRuntimeVersion").str()),
    ])
}

/// Namespaces: `Name Status Age`.
pub(super) const NAMESPACES: Printer = Printer::new(
    &[
        NAME,
        col("Status", "string", "The status of the namespace"),
        AGE,
    ],
    namespace,
);

fn namespace(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        o.path(&["status", "phase"]).str(),
        age(env, o)
    ])
}

const EVENT_COLUMNS: &[super::Column] = &[
    col("Last Seen", "string", desc::EVENT_LAST_TIMESTAMP),
    col("Type", "string", desc::EVENT_TYPE),
    col("Reason", "string", desc::EVENT_REASON),
    col("Object", "string", desc::EVENT_INVOLVED_OBJECT),
    wide("Subobject", "string", desc::OBJREF_FIELD_PATH),
    wide("Source", "string", desc::EVENT_SOURCE),
    col("Message", "string", desc::EVENT_MESSAGE),
    wide("First Seen", "string", desc::EVENT_FIRST_TIMESTAMP),
    wide("Count", "string", desc::EVENT_COUNT),
    super::Column {
        priority: 1,
        ..NAME
    },
];

/// Core events: `Last Seen Type Reason Object Message`; wide adds `Subobject Source First Seen
/// Count Name`.
pub(super) const EVENTS: Printer = Printer::new(EVENT_COLUMNS, core_event);

/// `events.k8s.io` events: the same columns, read from that API's field names.
pub(super) const EVENTS_V1: Printer = Printer::new(EVENT_COLUMNS, events_v1_event);

/// The fields of an event the printer reads, in core (`v1`) terms.
struct EventFields<'a> {
    name: String,
    first: J<'a>,
    last: J<'a>,
    event_time: J<'a>,
    count: i64,
    series: J<'a>,
    involved: J<'a>,
    kind: &'a str,
    reason: &'a str,
    message: &'a str,
    source_component: &'a str,
    source_host: &'a str,
    reporting_controller: &'a str,
    reporting_instance: &'a str,
}

fn core_event(env: &Env<'_>, o: J<'_>) -> Row {
    event(
        env,
        &EventFields {
            name: name(o),
            first: o.get("firstTimestamp"),
            last: o.get("lastTimestamp"),
            event_time: o.get("eventTime"),
            count: o.get("count").int(),
            series: o.get("series"),
            involved: o.get("involvedObject"),
            kind: o.get("type").str(),
            reason: o.get("reason").str(),
            message: o.get("message").str(),
            source_component: o.path(&["source", "component"]).str(),
            source_host: o.path(&["source", "host"]).str(),
            reporting_controller: o.get("reportingComponent").str(),
            reporting_instance: o.get("reportingInstance").str(),
        },
    )
}

fn events_v1_event(env: &Env<'_>, o: J<'_>) -> Row {
    event(
        env,
        &EventFields {
            name: name(o),
            first: o.get("deprecatedFirstTimestamp"),
            last: o.get("deprecatedLastTimestamp"),
            event_time: o.get("eventTime"),
            count: o.get("deprecatedCount").int(),
            series: o.get("series"),
            involved: o.get("regarding"),
            kind: o.get("type").str(),
            reason: o.get("reason").str(),
            message: o.get("note").str(),
            source_component: o.path(&["deprecatedSource", "component"]).str(),
            source_host: o.path(&["deprecatedSource", "host"]).str(),
            reporting_controller: o.get("reportingController").str(),
            reporting_instance: o.get("reportingInstance").str(),
        },
    )
}

/// `printEvent`.
fn event(env: &Env<'_>, e: &EventFields<'_>) -> Row {
    let first = if timestamp(e.first).is_some() {
        since(env, e.first)
    } else {
        since(env, e.event_time)
    };
    let mut last = if timestamp(e.last).is_some() {
        since(env, e.last)
    } else {
        first.clone()
    };
    let mut count = e.count;
    if e.series.is_set() {
        last = since(env, e.series.get("lastObservedTime"));
        count = e.series.get("count").int();
    } else if count == 0 {
        // Singleton events of the new API have no count.
        count = 1;
    }
    let kind = e.involved.get("kind").str().to_lowercase();
    let involved_name = e.involved.get("name").str();
    let target = if involved_name.is_empty() {
        kind
    } else {
        format!("{kind}/{involved_name}")
    };
    let first_non_empty = |a: &str, b: &str| if a.is_empty() { b } else { a }.to_owned();
    let component = first_non_empty(e.source_component, e.reporting_controller);
    let instance = first_non_empty(e.source_host, e.reporting_instance);
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    Row::new(cells![
        last,
        e.kind,
        e.reason,
        target,
        e.involved.get("fieldPath").str(),
        source,
        e.message.trim(),
        first,
        count,
        e.name.as_str(),
    ])
}

/// Secrets: `Name Type Data Age`.
pub(super) const SECRETS: Printer = Printer::new(
    &[
        NAME,
        col("Type", "string", desc::SECRET_TYPE),
        col("Data", "string", desc::SECRET_DATA),
        AGE,
    ],
    secret,
);

fn secret(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        o.get("type").str(),
        o.get("data").len(),
        age(env, o)
    ])
}

/// Config maps: `Name Data Age` (data and binaryData keys).
pub(super) const CONFIG_MAPS: Printer = Printer::new(
    &[NAME, col("Data", "string", desc::CM_DATA), AGE],
    config_map,
);

fn config_map(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        o.get("data").len() + o.get("binaryData").len(),
        age(env, o)
    ])
}

/// Service accounts: `Name Secrets Age`.
pub(super) const SERVICE_ACCOUNTS: Printer = Printer::new(
    &[NAME, col("Secrets", "string", desc::SA_SECRETS), AGE],
    service_account,
);

fn service_account(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![name(o), o.get("secrets").len(), age(env, o)])
}

/// `helper.GetAccessModesAsString`: `RWO,ROX,RWX,RWOP` in that order.
fn access_modes(modes: J<'_>) -> String {
    let has = |m: &str| modes.items().any(|x| x.str() == m);
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| has(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// The beta storage-class annotation, which wins over `spec.storageClassName`.
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

fn storage_class_of(o: J<'_>) -> String {
    let annotation = o.path(&["metadata", "annotations"]).get(BETA_STORAGE_CLASS);
    if let Some(class) = annotation.opt_str() {
        return class.to_owned();
    }
    o.path(&["spec", "storageClassName"]).str().to_owned()
}

fn or_unset(j: J<'_>) -> String {
    j.opt_str().unwrap_or("<unset>").to_owned()
}

/// Persistent volumes: `Name Capacity Access Modes Reclaim Policy Status Claim StorageClass
/// VolumeAttributesClass Reason Age`; wide `VolumeMode`.
pub(super) const PERSISTENT_VOLUMES: Printer = Printer::new(
    &[
        NAME,
        col("Capacity", "string", desc::PV_SPEC_CAPACITY),
        col("Access Modes", "string", desc::PV_SPEC_ACCESS_MODES),
        col("Reclaim Policy", "string", desc::PV_SPEC_RECLAIM),
        col("Status", "string", desc::PV_STATUS_PHASE),
        col("Claim", "string", desc::PV_SPEC_CLAIM_REF),
        col("StorageClass", "string", "StorageClass of the pv"),
        col(
            "VolumeAttributesClass",
            "string",
            "VolumeAttributesClass of the pv",
        ),
        col("Reason", "string", desc::PV_STATUS_REASON),
        AGE,
        wide("VolumeMode", "string", desc::PV_SPEC_VOLUME_MODE),
    ],
    persistent_volume,
);

fn persistent_volume(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let claim_ref = spec.get("claimRef");
    let claim = if claim_ref.is_set() {
        format!(
            "{}/{}",
            claim_ref.get("namespace").str(),
            claim_ref.get("name").str()
        )
    } else {
        String::new()
    };
    let phase = if deleting(o) {
        "Terminating"
    } else {
        o.path(&["status", "phase"]).str()
    };
    Row::new(cells![
        name(o),
        quantity(spec.path(&["capacity", "storage"])),
        access_modes(spec.get("accessModes")),
        spec.get("persistentVolumeReclaimPolicy").str(),
        phase,
        claim,
        storage_class_of(o),
        or_unset(spec.get("volumeAttributesClassName")),
        o.path(&["status", "reason"]).str(),
        age(env, o),
        or_unset(spec.get("volumeMode")),
    ])
}

/// Persistent volume claims: `Name Status Volume Capacity Access Modes StorageClass
/// VolumeAttributesClass Age`; wide `VolumeMode`.
pub(super) const PERSISTENT_VOLUME_CLAIMS: Printer = Printer::new(
    &[
        NAME,
        col("Status", "string", desc::PVC_STATUS_PHASE),
        col("Volume", "string", desc::PVC_SPEC_VOLUME_NAME),
        col("Capacity", "string", desc::PVC_STATUS_CAPACITY),
        col("Access Modes", "string", desc::PVC_STATUS_ACCESS_MODES),
        col("StorageClass", "string", "StorageClass of the pvc"),
        col(
            "VolumeAttributesClass",
            "string",
            "VolumeAttributesClass of the pvc",
        ),
        AGE,
        wide("VolumeMode", "string", desc::PVC_SPEC_VOLUME_MODE),
    ],
    persistent_volume_claim,
);

fn persistent_volume_claim(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let status = o.get("status");
    let phase = if deleting(o) {
        "Terminating"
    } else {
        status.get("phase").str()
    };
    let volume = spec.get("volumeName").str();
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity(status.path(&["capacity", "storage"])),
            access_modes(status.get("accessModes")),
        )
    };
    Row::new(cells![
        name(o),
        phase,
        volume,
        capacity,
        modes,
        storage_class_of(o),
        or_unset(spec.get("volumeAttributesClassName")),
        age(env, o),
        or_unset(spec.get("volumeMode")),
    ])
}

/// Resource quotas: `Name Request Limit Age` (`used/hard` per resource).
pub(super) const RESOURCE_QUOTAS: Printer = Printer::new(
    &[
        NAME,
        col(
            "Request",
            "string",
            "Request represents a minimum amount of cpu/memory that a container may consume.",
        ),
        col(
            "Limit",
            "string",
            "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
        ),
        AGE,
    ],
    resource_quota,
);

fn resource_quota(env: &Env<'_>, o: J<'_>) -> Row {
    let status = o.get("status");
    let mut resources: Vec<(&str, J<'_>)> = status.get("hard").entries().collect();
    resources.sort_by(|a, b| a.0.cmp(b.0));
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    for (resource, hard) in resources {
        let used = quantity(status.get("used").get(resource));
        let text = format!("{resource}: {used}/{}", quantity(hard));
        let pieces: Vec<&str> = resource.split('.').collect();
        if pieces.len() > 1 && pieces[0] == "limits" {
            limits.push(text);
        } else {
            requests.push(text);
        }
    }
    Row::new(cells![
        name(o),
        requests.join(", "),
        limits.join(", "),
        age(env, o)
    ])
}

/// Component statuses: `Name Status Message Error`.
pub(super) const COMPONENT_STATUSES: Printer = Printer::new(
    &[
        NAME,
        col("Status", "string", "Status of the component conditions"),
        col("Message", "string", "Message of the component conditions"),
        col("Error", "string", "Error of the component conditions"),
    ],
    component_status,
);

fn component_status(_: &Env<'_>, o: J<'_>) -> Row {
    let (mut status, mut message, mut error) = ("Unknown", "", "");
    if let Some(c) = super::condition(o.get("conditions"), "Healthy") {
        status = if c.get("status").str() == "True" {
            "Healthy"
        } else {
            "Unhealthy"
        };
        message = c.get("message").str();
        error = c.get("error").str();
    }
    Row::new(cells![name(o), status, message, error])
}
