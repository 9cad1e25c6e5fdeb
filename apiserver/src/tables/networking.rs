//! `networking.k8s.io/v1` printers (ingresses, ingress classes, network policies, IP addresses,
//! service CIDRs) and `discovery.k8s.io/v1` endpoint slices.

use super::{
    AGE, Env, J, NAME, Printer, Row, age, cells, col, desc, format_label_selector, list_with_more,
    name,
};

/// Ingresses: `Name Class Hosts Address Ports Age`.
pub(super) const INGRESSES: Printer = Printer::new(
    &[
        NAME,
        col(
            "Class",
            "string",
            "The name of the IngressClass resource that should be used for additional configuration",
        ),
        col(
            "Hosts",
            "string",
            "Hosts that incoming requests are matched against before the ingress rule",
        ),
        col(
            "Address",
            "string",
            "Address is a list containing ingress points for the load-balancer",
        ),
        col("Ports", "string", "Ports of TLS configurations that open"),
        AGE,
    ],
    ingress,
);

/// `formatHosts`: up to three rule hosts, `*` when none.
fn format_hosts(rules: J<'_>) -> String {
    const MAX: usize = 3;
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    let total = rules.len();
    for rule in rules.items() {
        if list.len() == MAX {
            more = true;
        }
        let host = rule.get("host").str();
        if !more && !host.is_empty() {
            list.push(host);
        }
    }
    if list.is_empty() {
        return "*".to_owned();
    }
    let ret = list.join(",");
    if more {
        format!("{ret} + {} more...", total - MAX as i64)
    } else {
        ret
    }
}

fn ingress(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let ports = if spec.get("tls").len() != 0 {
        "80, 443"
    } else {
        "80"
    };
    Row::new(cells![
        name(o),
        spec.get("ingressClassName").opt_str().unwrap_or("<none>"),
        format_hosts(spec.get("rules")),
        super::core::load_balancer_ingress(o.path(&["status", "loadBalancer"])),
        ports,
        age(env, o),
    ])
}

/// Ingress classes: `Name Controller Parameters Age`.
pub(super) const INGRESS_CLASSES: Printer = Printer::new(
    &[
        NAME,
        col(
            "Controller",
            "string",
            "Controller that is responsible for handling this class",
        ),
        col(
            "Parameters",
            "string",
            "A reference to a resource with additional parameters",
        ),
        AGE,
    ],
    ingress_class,
);

fn ingress_class(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let params = spec.get("parameters");
    let parameters = if params.is_set() {
        let mut p = params.get("kind").str().to_owned();
        if let Some(group) = params.get("apiGroup").opt_str() {
            p = format!("{p}.{group}");
        }
        format!("{p}/{}", params.get("name").str())
    } else {
        "<none>".to_owned()
    };
    Row::new(cells![
        name(o),
        spec.get("controller").str(),
        parameters,
        age(env, o)
    ])
}

/// Network policies: `Name Pod-Selector Age`.
pub(super) const NETWORK_POLICIES: Printer = Printer::new(
    &[
        NAME,
        col("Pod-Selector", "string", desc::NETPOL_SPEC_POD_SELECTOR),
        AGE,
    ],
    network_policy,
);

fn network_policy(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        format_label_selector(o.path(&["spec", "podSelector"])),
        age(env, o)
    ])
}

/// IP addresses: `Name ParentRef`. Upstream's row also carries the age as a third cell that no
/// column describes (kubectl ignores cells beyond the columns); it is reproduced.
pub(super) const IP_ADDRESSES: Printer = Printer::new(
    &[NAME, col("ParentRef", "string", desc::IPADDR_PARENT_REF)],
    ip_address,
);

fn ip_address(env: &Env<'_>, o: J<'_>) -> Row {
    let parent = o.path(&["spec", "parentRef"]);
    let parent_ref = if parent.is_set() {
        let group = parent.get("group").str();
        let resource = parent.get("resource").str();
        let mut s = if group.is_empty() {
            resource.to_lowercase()
        } else {
            format!("{resource}.{group}").to_lowercase()
        };
        let namespace = parent.get("namespace").str();
        if !namespace.is_empty() {
            s = format!("{s}/{namespace}");
        }
        format!("{s}/{}", parent.get("name").str())
    } else {
        "<none>".to_owned()
    };
    Row::new(cells![name(o), parent_ref, age(env, o)])
}

/// Service CIDRs: `Name CIDRs Age`.
pub(super) const SERVICE_CIDRS: Printer = Printer::new(
    &[NAME, col("CIDRs", "string", desc::SCIDR_CIDRS), AGE],
    service_cidr,
);

fn service_cidr(env: &Env<'_>, o: J<'_>) -> Row {
    let cidrs: Vec<&str> = o.path(&["spec", "cidrs"]).items().map(J::str).collect();
    Row::new(cells![name(o), cidrs.join(","), age(env, o)])
}

/// Endpoint slices: `Name AddressType Ports Endpoints Age`.
pub(super) const ENDPOINT_SLICES: Printer = Printer::new(
    &[
        NAME,
        col("AddressType", "string", desc::EPS_ADDRESS_TYPE),
        col("Ports", "string", desc::EPS_PORTS),
        col("Endpoints", "string", desc::EPS_ENDPOINTS),
        AGE,
    ],
    endpoint_slice,
);

/// `formatDiscoveryPorts`: up to three port numbers (or names, or `*`).
fn discovery_ports(ports: J<'_>) -> String {
    const MAX: usize = 3;
    let mut list = Vec::new();
    let mut more = false;
    let mut count = 0;
    for port in ports.items() {
        if list.len() < MAX {
            let text = if let Some(n) = port.get("port").opt_int() {
                n.to_string()
            } else if let Some(name) = port.get("name").opt_str() {
                name.to_owned()
            } else {
                "*".to_owned()
            };
            list.push(text);
        } else if list.len() == MAX {
            more = true;
        }
        count += 1;
    }
    list_with_more(&list, more, count, MAX)
}

/// `formatDiscoveryEndpoints`: up to three addresses.
fn discovery_endpoints(endpoints: J<'_>) -> String {
    const MAX: usize = 3;
    let mut list = Vec::new();
    let mut more = false;
    let mut count = 0;
    for endpoint in endpoints.items() {
        for address in endpoint.get("addresses").items() {
            if list.len() < MAX {
                list.push(address.str().to_owned());
            } else if list.len() == MAX {
                more = true;
            }
            count += 1;
        }
    }
    list_with_more(&list, more, count, MAX)
}

fn endpoint_slice(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        o.get("addressType").str(),
        discovery_ports(o.get("ports")),
        discovery_endpoints(o.get("endpoints")),
        age(env, o),
    ])
}
