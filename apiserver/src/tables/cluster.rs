//! Printers of the cluster-administration groups: `policy` (pod disruption budgets),
//! `autoscaling` (horizontal pod autoscalers), `rbac.authorization.k8s.io` (bindings; roles use
//! the default table), `certificates.k8s.io`, `coordination.k8s.io`, `scheduling.k8s.io`,
//! `node.k8s.io`, `flowcontrol.apiserver.k8s.io`, `admissionregistration.k8s.io` and
//! `apiregistration.k8s.io` (the aggregator's own convertor).

use std::cmp::Ordering;

use serde_json::Value;

use super::{
    AGE, Env, J, NAME, Printer, Row, age, cells, col, desc, format_label_selector, human_duration,
    int_or_string, name, quantity_ptr, wide,
};

/// Pod disruption budgets: `Name Min Available Max Unavailable Allowed Disruptions Age`.
pub(super) const POD_DISRUPTION_BUDGETS: Printer = Printer::new(
    &[
        NAME,
        col(
            "Min Available",
            "string",
            "The minimum number of pods that must be available.",
        ),
        col(
            "Max Unavailable",
            "string",
            "The maximum number of pods that may be unavailable.",
        ),
        col(
            "Allowed Disruptions",
            "integer",
            "Calculated number of pods that may be disrupted at this time.",
        ),
        AGE,
    ],
    pod_disruption_budget,
);

fn pod_disruption_budget(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let or_na = |j: J<'_>| {
        if j.is_set() {
            int_or_string(j)
        } else {
            "N/A".to_owned()
        }
    };
    Row::new(cells![
        name(o),
        or_na(spec.get("minAvailable")),
        or_na(spec.get("maxUnavailable")),
        o.path(&["status", "disruptionsAllowed"]).int(),
        age(env, o),
    ])
}

/// Horizontal pod autoscalers: `Name Reference Targets MinPods MaxPods Replicas Age`.
pub(super) const HORIZONTAL_POD_AUTOSCALERS: Printer = Printer::new(
    &[
        NAME,
        col("Reference", "string", desc::HPA_SPEC_TARGET_REF),
        col("Targets", "string", desc::HPA_SPEC_METRICS),
        col("MinPods", "string", desc::HPA_SPEC_MIN),
        col("MaxPods", "string", desc::HPA_SPEC_MAX),
        col("Replicas", "string", desc::HPA_STATUS_CURRENT),
        AGE,
    ],
    horizontal_pod_autoscaler,
);

/// One metric target as `formatHPAMetrics` prints it. `spec`/`status` are the metric source
/// and its status entry (e.g. `spec.resource`, `status.resource`).
fn metric_text(kind: &str, spec: J<'_>, status: J<'_>) -> String {
    let target = spec.get("target");
    let current = status.get("current");
    match kind {
        "External" | "Object" => {
            if target.get("averageValue").is_set() {
                let cur = if status.is_set() && current.get("averageValue").is_set() {
                    quantity_ptr(current.get("averageValue"))
                } else {
                    "<unknown>".to_owned()
                };
                format!("{cur}/{} (avg)", quantity_ptr(target.get("averageValue")))
            } else {
                let cur = if status.is_set() {
                    quantity_ptr(current.get("value"))
                } else {
                    "<unknown>".to_owned()
                };
                format!("{cur}/{}", quantity_ptr(target.get("value")))
            }
        }
        "Pods" => {
            let cur = if status.is_set() {
                quantity_ptr(current.get("averageValue"))
            } else {
                "<unknown>".to_owned()
            };
            format!("{cur}/{}", quantity_ptr(target.get("averageValue")))
        }
        "Resource" | "ContainerResource" => {
            let resource = spec.get("name").str();
            if target.get("averageValue").is_set() {
                let cur = if status.is_set() {
                    quantity_ptr(current.get("averageValue"))
                } else {
                    "<unknown>".to_owned()
                };
                format!(
                    "{resource}: {cur}/{}",
                    quantity_ptr(target.get("averageValue"))
                )
            } else {
                let cur = match current.get("averageUtilization").opt_int() {
                    Some(u) if status.is_set() => format!("{u}%"),
                    _ => "<unknown>".to_owned(),
                };
                let tgt = target
                    .get("averageUtilization")
                    .opt_int()
                    .map_or_else(|| "<auto>".to_owned(), |u| format!("{u}%"));
                format!("{resource}: {cur}/{tgt}")
            }
        }
        _ => "<unknown type>".to_owned(),
    }
}

/// The JSON field of a metric source type (`ContainerResource` → `containerResource`).
fn source_field(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "External" => "external",
        "Object" => "object",
        "Pods" => "pods",
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        _ => return None,
    })
}

/// `formatHPAMetrics`: up to two targets, `+ N more...`, `<none>` without metrics.
fn format_hpa_metrics(specs: &[J<'_>], statuses: &[J<'_>]) -> String {
    const MAX: usize = 2;
    if specs.is_empty() {
        return "<none>".to_owned();
    }
    let mut list = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let kind = spec.get("type").str();
        let text = match source_field(kind) {
            Some(field) => {
                let status = statuses.get(i).map_or(J::Missing, |s| s.get(field));
                metric_text(kind, spec.get(field), status)
            }
            None => "<unknown type>".to_owned(),
        };
        list.push(text);
    }
    let count = list.len();
    if count > MAX {
        list.truncate(MAX);
        return format!("{} + {} more...", list.join(", "), count - MAX);
    }
    list.join(", ")
}

fn horizontal_pod_autoscaler(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let status = o.get("status");
    // autoscaling/v1 keeps one CPU target; upstream converts it to a Resource metric.
    let v1_metric;
    let v1_status;
    let (specs, statuses): (Vec<J<'_>>, Vec<J<'_>>) = if env.resource.version == "v1" {
        match spec.get("targetCPUUtilizationPercentage").opt_int() {
            Some(target) => {
                v1_metric = serde_json::json!({
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}},
                });
                let mut current = serde_json::Map::new();
                if let Some(u) = status.get("currentCPUUtilizationPercentage").opt_int() {
                    current.insert("averageUtilization".into(), Value::from(u));
                }
                v1_status = serde_json::json!({
                    "type": "Resource",
                    "resource": {"name": "cpu", "current": current},
                });
                let has_status = status.get("currentCPUUtilizationPercentage").is_set();
                (
                    vec![J::Val(&v1_metric)],
                    if has_status {
                        vec![J::Val(&v1_status)]
                    } else {
                        Vec::new()
                    },
                )
            }
            None => (Vec::new(), Vec::new()),
        }
    } else {
        (
            spec.get("metrics").items().collect(),
            status.get("currentMetrics").items().collect(),
        )
    };
    let target = spec.get("scaleTargetRef");
    let min_pods = spec
        .get("minReplicas")
        .opt_int()
        .map_or_else(|| "<unset>".to_owned(), |n| n.to_string());
    Row::new(cells![
        name(o),
        format!("{}/{}", target.get("kind").str(), target.get("name").str()),
        format_hpa_metrics(&specs, &statuses),
        min_pods,
        spec.get("maxReplicas").int(),
        status.get("currentReplicas").int(),
        age(env, o),
    ])
}

/// Role bindings: `Name Role Age`; wide `Users Groups ServiceAccounts`.
pub(super) const ROLE_BINDINGS: Printer = Printer::new(
    &[
        NAME,
        col("Role", "string", desc::RB_ROLE_REF),
        AGE,
        wide("Users", "string", "Users in the roleBinding"),
        wide("Groups", "string", "Groups in the roleBinding"),
        wide(
            "ServiceAccounts",
            "string",
            "ServiceAccounts in the roleBinding",
        ),
    ],
    binding,
);

/// Cluster role bindings: `Name Role Age`; wide `Users Groups ServiceAccounts`.
pub(super) const CLUSTER_ROLE_BINDINGS: Printer = Printer::new(
    &[
        NAME,
        col("Role", "string", desc::CRB_ROLE_REF),
        AGE,
        wide("Users", "string", "Users in the clusterRoleBinding"),
        wide("Groups", "string", "Groups in the clusterRoleBinding"),
        wide(
            "ServiceAccounts",
            "string",
            "ServiceAccounts in the clusterRoleBinding",
        ),
    ],
    binding,
);

fn binding(env: &Env<'_>, o: J<'_>) -> Row {
    let role_ref = o.get("roleRef");
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in o.get("subjects").items() {
        let subject_name = s.get("name").str();
        match s.get("kind").str() {
            "ServiceAccount" => sas.push(format!("{}/{subject_name}", s.get("namespace").str())),
            "User" => users.push(subject_name.to_owned()),
            "Group" => groups.push(subject_name.to_owned()),
            _ => {}
        }
    }
    Row::new(cells![
        name(o),
        format!(
            "{}/{}",
            role_ref.get("kind").str(),
            role_ref.get("name").str()
        ),
        age(env, o),
        users.join(", "),
        groups.join(", "),
        sas.join(", "),
    ])
}

/// Certificate signing requests: `Name Age SignerName Requestor RequestedDuration Condition`.
pub(super) const CERTIFICATE_SIGNING_REQUESTS: Printer = Printer::new(
    &[
        NAME,
        AGE,
        col("SignerName", "string", desc::CSR_SPEC_SIGNER),
        col("Requestor", "string", desc::CSR_SPEC_REQUEST),
        col("RequestedDuration", "string", desc::CSR_SPEC_EXPIRATION),
        col("Condition", "string", desc::CSR_STATUS_CONDITIONS),
    ],
    certificate_signing_request,
);

/// `extractCSRStatus`: `Denied`/`Approved`/`Pending`, then `,Failed` and `,Issued`.
fn csr_status(o: J<'_>) -> String {
    let status = o.get("status");
    let has = |t: &str| {
        status
            .get("conditions")
            .items()
            .any(|c| c.get("type").str() == t)
    };
    let mut text = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_owned();
    if has("Failed") {
        text.push_str(",Failed");
    }
    if !status.get("certificate").str().is_empty() {
        text.push_str(",Issued");
    }
    text
}

fn certificate_signing_request(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let signer = match spec.get("signerName").str() {
        "" => "<none>",
        s => s,
    };
    let duration = spec.get("expirationSeconds").opt_int().map_or_else(
        || "<none>".to_owned(),
        |s| human_duration(s.saturating_mul(1_000_000_000)),
    );
    Row::new(cells![
        name(o),
        age(env, o),
        signer,
        spec.get("username").str(),
        duration,
        csr_status(o),
    ])
}

/// Leases: `Name Holder Age`.
pub(super) const LEASES: Printer = Printer::new(
    &[NAME, col("Holder", "string", desc::LEASE_SPEC_HOLDER), AGE],
    lease,
);

fn lease(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        o.path(&["spec", "holderIdentity"]).str(),
        age(env, o)
    ])
}

/// Priority classes: `Name Value Global-Default Age PreemptionPolicy`.
pub(super) const PRIORITY_CLASSES: Printer = Printer::new(
    &[
        NAME,
        col("Value", "integer", desc::PC_VALUE),
        col("Global-Default", "boolean", desc::PC_GLOBAL_DEFAULT),
        AGE,
        col("PreemptionPolicy", "string", desc::PC_PREEMPTION),
    ],
    priority_class,
);

fn priority_class(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![
        name(o),
        o.get("value").int(),
        o.get("globalDefault").bool(),
        age(env, o),
        o.get("preemptionPolicy").str(),
    ])
}

/// Runtime classes: `Name Handler Age`. (Upstream looks the handler's description up in
/// `ObjectMeta`'s documentation, which has none: the description is empty.)
pub(super) const RUNTIME_CLASSES: Printer =
    Printer::new(&[NAME, col("Handler", "string", ""), AGE], runtime_class);

fn runtime_class(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![name(o), o.get("handler").str(), age(env, o)])
}

/// Flow schemas: `Name PriorityLevel MatchingPrecedence DistinguisherMethod Age MissingPL`,
/// rows ordered by matching precedence, then name.
pub(super) const FLOW_SCHEMAS: Printer = Printer {
    columns: &[
        NAME,
        col("PriorityLevel", "string", desc::FS_PL_NAME),
        col("MatchingPrecedence", "string", desc::FS_PRECEDENCE),
        col("DistinguisherMethod", "string", desc::FS_DISTINGUISHER),
        AGE,
        col(
            "MissingPL",
            "string",
            "references a broken or non-existent PriorityLevelConfiguration",
        ),
    ],
    row: flow_schema,
    order: Some(flow_schema_order),
};

fn flow_schema_order(a: J<'_>, b: J<'_>) -> Ordering {
    let precedence = |j: J<'_>| j.path(&["spec", "matchingPrecedence"]).int();
    precedence(a)
        .cmp(&precedence(b))
        .then_with(|| name(a).cmp(&name(b)))
}

fn flow_schema(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let distinguisher = spec
        .get("distinguisherMethod")
        .get("type")
        .opt_str()
        .map_or_else(
            || {
                if spec.get("distinguisherMethod").is_set() {
                    String::new()
                } else {
                    "<none>".to_owned()
                }
            },
            str::to_owned,
        );
    let missing = super::condition(o.path(&["status", "conditions"]), "Dangling")
        .map_or_else(|| "?".to_owned(), |c| c.get("status").str().to_owned());
    Row::new(cells![
        name(o),
        spec.path(&["priorityLevelConfiguration", "name"]).str(),
        spec.get("matchingPrecedence").int(),
        distinguisher,
        age(env, o),
        missing,
    ])
}

/// Priority level configurations: `Name Type NominalConcurrencyShares Queues HandSize
/// QueueLengthLimit Age`.
pub(super) const PRIORITY_LEVEL_CONFIGURATIONS: Printer = Printer::new(
    &[
        NAME,
        col("Type", "string", desc::PL_TYPE),
        col("NominalConcurrencyShares", "string", desc::PL_NCS),
        col("Queues", "string", desc::PL_QUEUES),
        col("HandSize", "string", desc::PL_HAND_SIZE),
        col("QueueLengthLimit", "string", desc::PL_QUEUE_LENGTH),
        AGE,
    ],
    priority_level,
);

fn priority_level(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let limited = spec.get("limited");
    let none = || Value::from("<none>");
    let (mut ncs, mut queues, mut hand_size, mut queue_length) = (none(), none(), none(), none());
    if limited.is_set() {
        ncs = Value::from(limited.get("nominalConcurrencyShares").int());
        let queuing = limited.path(&["limitResponse", "queuing"]);
        if queuing.is_set() {
            queues = Value::from(queuing.get("queues").int());
            hand_size = Value::from(queuing.get("handSize").int());
            queue_length = Value::from(queuing.get("queueLengthLimit").int());
        }
    }
    Row::new(cells![
        name(o),
        spec.get("type").str(),
        ncs,
        queues,
        hand_size,
        queue_length,
        age(env, o),
    ])
}

const WEBHOOK_COLUMNS: &[super::Column] = &[
    NAME,
    col(
        "Webhooks",
        "integer",
        "Webhooks indicates the number of webhooks registered in this configuration",
    ),
    AGE,
];

/// Mutating webhook configurations: `Name Webhooks Age`.
pub(super) const MUTATING_WEBHOOK_CONFIGURATIONS: Printer =
    Printer::new(WEBHOOK_COLUMNS, webhook_configuration);

/// Validating webhook configurations: `Name Webhooks Age`.
pub(super) const VALIDATING_WEBHOOK_CONFIGURATIONS: Printer =
    Printer::new(WEBHOOK_COLUMNS, webhook_configuration);

fn webhook_configuration(env: &Env<'_>, o: J<'_>) -> Row {
    Row::new(cells![name(o), o.get("webhooks").len(), age(env, o)])
}

/// Validating admission policies: `Name Validations ParamKind Age`.
pub(super) const VALIDATING_ADMISSION_POLICIES: Printer = Printer::new(
    &[
        NAME,
        col(
            "Validations",
            "integer",
            "Validations indicates the number of validation rules defined in this configuration",
        ),
        col(
            "ParamKind",
            "string",
            "ParamKind specifies the kind of resources used to parameterize this policy",
        ),
        AGE,
    ],
    validating_admission_policy,
);

fn validating_admission_policy(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let param_kind = spec.get("paramKind");
    let param_kind = if param_kind.is_set() {
        format!(
            "{}/{}",
            param_kind.get("apiVersion").str(),
            param_kind.get("kind").str()
        )
    } else {
        "<unset>".to_owned()
    };
    Row::new(cells![
        name(o),
        spec.get("validations").len(),
        param_kind,
        age(env, o)
    ])
}

/// Validating admission policy bindings: `Name PolicyName ParamRef Age`.
pub(super) const VALIDATING_ADMISSION_POLICY_BINDINGS: Printer = Printer::new(
    &[
        NAME,
        col(
            "PolicyName",
            "string",
            "PolicyName indicates the policy definition which the policy binding binded to",
        ),
        col(
            "ParamRef",
            "string",
            "ParamRef indicates the param resource which sets the configration param",
        ),
        AGE,
    ],
    validating_admission_policy_binding,
);

fn validating_admission_policy_binding(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let param_ref = spec.get("paramRef");
    let mut param = "<unset>".to_owned();
    if param_ref.is_set() {
        let ref_name = param_ref.get("name").str();
        let namespace = param_ref.get("namespace").str();
        if !ref_name.is_empty() {
            param = if namespace.is_empty() {
                // Whether the param is cluster-scoped is unknown here.
                format!("*/{ref_name}")
            } else {
                format!("{namespace}/{ref_name}")
            };
        } else if param_ref.get("selector").is_set() {
            param = format_label_selector(param_ref.get("selector"));
        }
    }
    Row::new(cells![
        name(o),
        spec.get("policyName").str(),
        param,
        age(env, o)
    ])
}

/// API services (the aggregator's convertor): `Name Service Available Age`.
pub(super) const API_SERVICES: Printer = Printer::new(
    &[
        NAME,
        col(
            "Service",
            "string",
            "The reference to the service that hosts this API endpoint.",
        ),
        col("Available", "string", "Whether this service is available."),
        AGE,
    ],
    api_service,
);

fn api_service(env: &Env<'_>, o: J<'_>) -> Row {
    let service = o.path(&["spec", "service"]);
    let service = if service.is_set() {
        format!(
            "{}/{}",
            service.get("namespace").str(),
            service.get("name").str()
        )
    } else {
        "Local".to_owned()
    };
    let available = match super::condition(o.path(&["status", "conditions"]), "Available") {
        None => "Unknown".to_owned(),
        Some(c) => {
            let status = c.get("status").str();
            let reason = c.get("reason").str();
            if status == "True" || reason.is_empty() {
                status.to_owned()
            } else {
                format!("{status} ({reason})")
            }
        }
    };
    Row::new(cells![name(o), service, available, age(env, o)])
}
