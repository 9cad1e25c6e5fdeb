//! Server-side printing: `meta.k8s.io/v1` `Table` answers, as kube-apiserver v1.33 prints them.
//!
//! kubectl asks for a Table (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io,…`) on every
//! `kubectl get` that prints columns; the server decides the columns. Upstream's columns come
//! from `pkg/printers/internalversion/printers.go` (one print function per built-in kind), from
//! the aggregator's own convertor for `APIService`, and for every other resource (roles, limit
//! ranges, CRDs, …) from the default convertor in `k8s.io/apiserver/pkg/registry/rest/table.go`:
//! `Name` and `Created At`.
//!
//! The server always prints the wide form (`GenerateOptions{Wide: true}`): every column,
//! including those of priority 1 that kubectl shows only with `-o wide`, has a cell.
//! Column names are upstream's (`Name`, `Ready`, `Nominated Node`); kubectl upper-cases them.
//!
//! Each printer reads the object as the JSON kube-apiserver would return, missing fields being
//! Go's zero values (the stored objects are already defaulted). One file per API group:
//! [`pod`] (the pod printer and its status logic), [`core`], [`apps`], [`batch`],
//! [`networking`] (with `discovery.k8s.io`), [`storage`] and [`cluster`] (policy, autoscaling,
//! RBAC, certificates, coordination, scheduling, node, flow control, admission registration,
//! API registration).

mod apps;
mod batch;
mod cluster;
mod core;
mod desc;
mod networking;
mod pod;
mod storage;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::registry::catalog::ResourceInfo;

/// The Content-Type of a Table response.
pub const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// What each row carries in `object` (`includeObject` query parameter; default Metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object: `object` is `null`.
    None,
    /// A `PartialObjectMetadata` with the object's metadata (what kubectl needs for `-A`'s
    /// NAMESPACE column and `--show-labels`).
    #[default]
    Metadata,
    /// The whole object (kubectl asks for it with `--sort-by`).
    Object,
}

impl IncludeObject {
    /// Reads the `includeObject` query parameter: `None`, `Metadata` or `Object`; absent (or
    /// any other value) means `Metadata`, the default.
    pub fn from_query(v: Option<&str>) -> IncludeObject {
        match v {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// Whether an Accept header asks for a Table (`application/json;as=Table;v=v1;g=meta.k8s.io`, also v1beta1).
///
/// Clauses are taken in order of preference (`q`, then the order given), as upstream's content
/// negotiation does: the answer is a Table when the first clause this server can serve is a
/// Table clause, and not when it is a plain media type (`application/json`, `*/*`, …). Clauses
/// asking for something else this server does not produce (protobuf Tables, `as=PartialObjectMetadataList`)
/// are skipped.
pub fn wants_table(accept: &str) -> bool {
    let mut clauses: Vec<(f32, usize, bool)> = Vec::new();
    for (index, clause) in accept.split(',').enumerate() {
        let mut parts = clause.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        if media.is_empty() {
            continue;
        }
        let (mut q, mut r#as, mut g, mut v) = (1.0f32, None, None, None);
        for param in parts {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match key.trim().to_ascii_lowercase().as_str() {
                "q" => q = value.parse().unwrap_or(0.0),
                "as" => r#as = Some(value.to_owned()),
                "g" => g = Some(value.to_owned()),
                "v" => v = Some(value.to_owned()),
                _ => {}
            }
        }
        if q <= 0.0 {
            continue;
        }
        let json_like = matches!(media.as_str(), "application/json" | "application/*" | "*/*");
        let table = match r#as.as_deref() {
            Some("Table") => {
                if !json_like
                    || g.as_deref() != Some("meta.k8s.io")
                    || !matches!(v.as_deref(), Some("v1" | "v1beta1"))
                {
                    continue;
                }
                true
            }
            Some(_) => continue,
            None => {
                let plain = json_like
                    || matches!(
                        media.as_str(),
                        "application/yaml" | "application/vnd.kubernetes.protobuf"
                    );
                if !plain {
                    continue;
                }
                false
            }
        };
        clauses.push((q, index, table));
    }
    // Highest q first; equal q keeps the client's order.
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    clauses.first().is_some_and(|c| c.2)
}

/// A Table of `objects` of resource `r`; `list_metadata` is the list's metadata (resourceVersion, continue, remainingItemCount) copied into the Table's metadata.
///
/// For a single object (a GET), pass `{"resourceVersion": <the object's>}`, as upstream does.
/// AGE cells are computed against the current time.
pub fn to_table(
    r: &ResourceInfo,
    objects: &[Map<String, Value>],
    list_metadata: Value,
    include: IncludeObject,
) -> Value {
    table_at(r, objects, list_metadata, include, Timestamp::now())
}

/// [`to_table`] with an explicit "now" (for AGE and duration cells).
fn table_at(
    r: &ResourceInfo,
    objects: &[Map<String, Value>],
    list_metadata: Value,
    include: IncludeObject,
    now: Timestamp,
) -> Value {
    let env = Env { now, resource: r };
    if crate::crd::serve::is_custom(r) {
        let (columns, cells) = crate::crd::serve::table(r, objects, now);
        let rows: Vec<Value> = objects
            .iter()
            .zip(cells)
            .map(|(obj, cells)| json!({ "cells": cells, "object": row_object(obj, include) }))
            .collect();
        return json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": match list_metadata {
                Value::Object(m) => Value::Object(m),
                _ => Value::Object(Map::new()),
            },
            "columnDefinitions": columns,
            "rows": rows,
        });
    }
    let printer = printer_for(r);
    let mut printed: Vec<(&Map<String, Value>, Row)> = objects
        .iter()
        .map(|o| (o, (printer.row)(&env, J::Obj(o))))
        .collect();
    if let Some(order) = printer.order {
        printed.sort_by(|a, b| order(J::Obj(a.0), J::Obj(b.0)));
    }
    let columns: Vec<Value> = printer
        .columns
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = printed
        .into_iter()
        .map(|(obj, row)| {
            let mut out = Map::new();
            out.insert("cells".into(), Value::Array(row.cells));
            if !row.conditions.is_empty() {
                out.insert("conditions".into(), Value::Array(row.conditions));
            }
            out.insert("object".into(), row_object(obj, include));
            Value::Object(out)
        })
        .collect();
    let metadata = match list_metadata {
        Value::Object(m) => Value::Object(m),
        _ => Value::Object(Map::new()),
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// A row's `object`, as upstream's `transformObject` fills it for `includeObject`.
fn row_object(obj: &Map<String, Value>, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => Value::Object(obj.clone()),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

/// The printer of a resource: upstream's for kinds that have one, else the default convertor's.
fn printer_for(r: &ResourceInfo) -> Printer {
    match (r.group, r.plural) {
        ("", "pods") => pod::PODS,
        ("", "podtemplates") => core::POD_TEMPLATES,
        ("", "replicationcontrollers") => core::REPLICATION_CONTROLLERS,
        ("", "services") => core::SERVICES,
        ("", "endpoints") => core::ENDPOINTS,
        ("", "nodes") => core::NODES,
        ("", "namespaces") => core::NAMESPACES,
        ("", "events") => core::EVENTS,
        ("events.k8s.io", "events") => core::EVENTS_V1,
        ("", "secrets") => core::SECRETS,
        ("", "configmaps") => core::CONFIG_MAPS,
        ("", "serviceaccounts") => core::SERVICE_ACCOUNTS,
        ("", "persistentvolumes") => core::PERSISTENT_VOLUMES,
        ("", "persistentvolumeclaims") => core::PERSISTENT_VOLUME_CLAIMS,
        ("", "resourcequotas") => core::RESOURCE_QUOTAS,
        ("", "componentstatuses") => core::COMPONENT_STATUSES,
        ("apps", "deployments") => apps::DEPLOYMENTS,
        ("apps", "replicasets") => apps::REPLICA_SETS,
        ("apps", "daemonsets") => apps::DAEMON_SETS,
        ("apps", "statefulsets") => apps::STATEFUL_SETS,
        ("apps", "controllerrevisions") => apps::CONTROLLER_REVISIONS,
        ("batch", "jobs") => batch::JOBS,
        ("batch", "cronjobs") => batch::CRON_JOBS,
        ("networking.k8s.io", "ingresses") => networking::INGRESSES,
        ("networking.k8s.io", "ingressclasses") => networking::INGRESS_CLASSES,
        ("networking.k8s.io", "networkpolicies") => networking::NETWORK_POLICIES,
        ("networking.k8s.io", "ipaddresses") => networking::IP_ADDRESSES,
        ("networking.k8s.io", "servicecidrs") => networking::SERVICE_CIDRS,
        ("discovery.k8s.io", "endpointslices") => networking::ENDPOINT_SLICES,
        ("storage.k8s.io", "storageclasses") => storage::STORAGE_CLASSES,
        ("storage.k8s.io", "volumeattributesclasses") => storage::VOLUME_ATTRIBUTES_CLASSES,
        ("storage.k8s.io", "volumeattachments") => storage::VOLUME_ATTACHMENTS,
        ("storage.k8s.io", "csidrivers") => storage::CSI_DRIVERS,
        ("storage.k8s.io", "csinodes") => storage::CSI_NODES,
        ("storage.k8s.io", "csistoragecapacities") => storage::CSI_STORAGE_CAPACITIES,
        ("policy", "poddisruptionbudgets") => cluster::POD_DISRUPTION_BUDGETS,
        ("autoscaling", "horizontalpodautoscalers") => cluster::HORIZONTAL_POD_AUTOSCALERS,
        ("rbac.authorization.k8s.io", "rolebindings") => cluster::ROLE_BINDINGS,
        ("rbac.authorization.k8s.io", "clusterrolebindings") => cluster::CLUSTER_ROLE_BINDINGS,
        ("certificates.k8s.io", "certificatesigningrequests") => {
            cluster::CERTIFICATE_SIGNING_REQUESTS
        }
        ("coordination.k8s.io", "leases") => cluster::LEASES,
        ("scheduling.k8s.io", "priorityclasses") => cluster::PRIORITY_CLASSES,
        ("node.k8s.io", "runtimeclasses") => cluster::RUNTIME_CLASSES,
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => cluster::FLOW_SCHEMAS,
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => {
            cluster::PRIORITY_LEVEL_CONFIGURATIONS
        }
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            cluster::MUTATING_WEBHOOK_CONFIGURATIONS
        }
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            cluster::VALIDATING_WEBHOOK_CONFIGURATIONS
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            cluster::VALIDATING_ADMISSION_POLICIES
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            cluster::VALIDATING_ADMISSION_POLICY_BINDINGS
        }
        ("apiregistration.k8s.io", "apiservices") => cluster::API_SERVICES,
        _ => DEFAULT,
    }
}

// ---------------------------------------------------------------------------------------------
// Printer plumbing shared by the per-group files.

/// One column definition (`metav1.TableColumnDefinition`).
#[derive(Debug, Clone, Copy)]
struct Column {
    name: &'static str,
    /// The OpenAPI type: `string`, `integer`, `boolean`, `date`.
    kind: &'static str,
    /// `name` for the column holding the object's name, else empty.
    format: &'static str,
    description: &'static str,
    /// 0: always shown; 1: shown by kubectl only with `-o wide`.
    priority: i32,
}

/// A column shown by default.
const fn col(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind,
        format: "",
        description,
        priority: 0,
    }
}

/// A column kubectl shows only with `-o wide` (priority 1).
const fn wide(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind,
        format: "",
        description,
        priority: 1,
    }
}

/// The `Name` column every printer starts with (format `name`).
const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: desc::OBJ_NAME,
    priority: 0,
};

/// The `Age` column.
const AGE: Column = col("Age", "string", desc::OBJ_CREATION);

/// The columns under `-o wide` of workload printers: containers and images of the template.
const CONTAINERS: Column = wide(
    "Containers",
    "string",
    "Names of each container in the template.",
);
/// See [`CONTAINERS`].
const IMAGES: Column = wide(
    "Images",
    "string",
    "Images referenced by each container in the template.",
);

/// What a print function needs besides the object.
struct Env<'a> {
    /// The time AGE and durations are measured against.
    now: Timestamp,
    /// The resource being printed (its version decides a few conversions).
    resource: &'a ResourceInfo,
}

/// One printed row.
#[derive(Debug, Default)]
struct Row {
    cells: Vec<Value>,
    /// `TableRowCondition`s (a pod that has completed carries `Completed`).
    conditions: Vec<Value>,
}

impl Row {
    fn new(cells: Vec<Value>) -> Row {
        Row {
            cells,
            conditions: Vec::new(),
        }
    }
}

/// Builds a cell list from values of mixed types (`&str`, `String`, `i64`, `bool`, `Value`).
macro_rules! cells {
    ($($cell:expr),* $(,)?) => {
        vec![$(serde_json::Value::from($cell)),*]
    };
}
use cells;

/// A print function.
type RowFn = fn(&Env<'_>, J<'_>) -> Row;
/// An ordering of the rows (upstream sorts flow schemas).
type OrderFn = fn(J<'_>, J<'_>) -> std::cmp::Ordering;

/// A resource's columns and print function.
#[derive(Clone, Copy)]
struct Printer {
    columns: &'static [Column],
    row: RowFn,
    order: Option<OrderFn>,
}

impl Printer {
    const fn new(columns: &'static [Column], row: RowFn) -> Printer {
        Printer {
            columns,
            row,
            order: None,
        }
    }
}

/// The default convertor (`rest.NewDefaultTableConvertor`): name and creation time (RFC 3339).
const DEFAULT: Printer = Printer::new(
    &[NAME, col("Created At", "date", desc::OBJ_CREATION)],
    default_row,
);

fn default_row(_: &Env<'_>, o: J<'_>) -> Row {
    let created = timestamp(o.path(&["metadata", "creationTimestamp"]))
        .map_or_else(|| "0001-01-01T00:00:00Z".to_owned(), rfc3339);
    Row::new(cells![name(o), created])
}

/// A timestamp as Go's `time.RFC3339` prints a UTC time: whole seconds, `Z`.
fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

// ---------------------------------------------------------------------------------------------
// JSON access with Go's zero-value semantics.

/// A position in a JSON object: missing fields (and `null`) read as Go's zero values.
#[derive(Debug, Clone, Copy)]
enum J<'a> {
    /// An object given as a map.
    Obj(&'a Map<String, Value>),
    /// Any JSON value (never `null`).
    Val(&'a Value),
    /// Absent or `null`.
    Missing,
}

impl<'a> J<'a> {
    fn of(v: Option<&'a Value>) -> J<'a> {
        match v {
            None | Some(Value::Null) => J::Missing,
            Some(v) => J::Val(v),
        }
    }

    /// The field `key` of an object.
    fn get(self, key: &str) -> J<'a> {
        J::of(self.map().and_then(|m| m.get(key)))
    }

    /// The field at `path`.
    fn path(self, path: &[&str]) -> J<'a> {
        path.iter().fold(self, |j, k| j.get(k))
    }

    fn map(self) -> Option<&'a Map<String, Value>> {
        match self {
            J::Obj(m) | J::Val(Value::Object(m)) => Some(m),
            _ => None,
        }
    }

    /// Whether the field is present and not `null` (a Go pointer that is not nil).
    fn is_set(self) -> bool {
        !matches!(self, J::Missing)
    }

    /// The string, or `""`.
    fn str(self) -> &'a str {
        self.opt_str().unwrap_or("")
    }

    fn opt_str(self) -> Option<&'a str> {
        match self {
            J::Val(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// The integer, or 0.
    fn int(self) -> i64 {
        self.opt_int().unwrap_or(0)
    }

    fn opt_int(self) -> Option<i64> {
        match self {
            J::Val(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
            _ => None,
        }
    }

    fn opt_bool(self) -> Option<bool> {
        match self {
            J::Val(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// The boolean, or `false`.
    fn bool(self) -> bool {
        self.opt_bool().unwrap_or(false)
    }

    /// The elements of an array (none if not an array).
    fn items(self) -> impl Iterator<Item = J<'a>> {
        let items: &'a [Value] = match self {
            J::Val(Value::Array(a)) => a,
            _ => &[],
        };
        items.iter().map(|v| J::of(Some(v)))
    }

    /// The entries of an object (none if not an object).
    fn entries(self) -> impl Iterator<Item = (&'a str, J<'a>)> {
        self.map()
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), J::of(Some(v)))))
    }

    /// The length of an array or object (Go's `len` of a slice or map).
    fn len(self) -> i64 {
        match self {
            J::Obj(m) | J::Val(Value::Object(m)) => m.len() as i64,
            J::Val(Value::Array(a)) => a.len() as i64,
            _ => 0,
        }
    }
}

/// `metadata.name`.
fn name(o: J<'_>) -> String {
    o.path(&["metadata", "name"]).str().to_owned()
}

/// Whether `metadata.deletionTimestamp` is set.
fn deleting(o: J<'_>) -> bool {
    o.path(&["metadata", "deletionTimestamp"]).is_set()
}

/// A `metav1.Time` / `MicroTime`; `None` for Go's zero time (absent, null or unparseable).
fn timestamp(j: J<'_>) -> Option<Timestamp> {
    j.opt_str().and_then(|s| s.parse::<Timestamp>().ok())
}

/// `translateTimestampSince`: the human duration since `t`, `<unknown>` for the zero time.
fn since(env: &Env<'_>, j: J<'_>) -> String {
    match timestamp(j) {
        Some(t) => human_duration(nanos_between(t, env.now)),
        None => "<unknown>".to_owned(),
    }
}

/// The AGE cell: the human duration since `metadata.creationTimestamp`.
fn age(env: &Env<'_>, o: J<'_>) -> String {
    since(env, o.path(&["metadata", "creationTimestamp"]))
}

/// Nanoseconds from `from` to `to` (Go's `to.Sub(from)`), saturating like `time.Duration`.
fn nanos_between(from: Timestamp, to: Timestamp) -> i64 {
    let d = to.as_nanosecond() - from.as_nanosecond();
    d.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Go's `duration.HumanDuration` (`k8s.io/apimachinery/pkg/util/duration`): about two
/// significant figures, e.g. `5s`, `3m2s`, `12m`, `5h3m`, `2d4h`, `400d`, `3y20d`.
/// A duration below −1s is `<invalid>` (clock skew up to 2s counts as now).
fn human_duration(nanos: i64) -> String {
    const SECOND: i64 = 1_000_000_000;
    const MINUTE: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MINUTE;
    let seconds = nanos / SECOND;
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = nanos / MINUTE;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = nanos / HOUR;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, joined by commas; `<none>` when empty.
fn format_labels(map: J<'_>) -> String {
    let mut pairs: Vec<(&str, &str)> = map.entries().map(|(k, v)| (k, v.str())).collect();
    pairs.sort();
    let s = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if s.is_empty() { "<none>".to_owned() } else { s }
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: requirements sorted by key, values sorted;
/// `""` for a nil or empty selector; `Err` for an invalid one.
fn label_selector_string(sel: J<'_>) -> Result<String, ()> {
    let mut reqs: Vec<(String, String)> = Vec::new();
    for (k, v) in sel.get("matchLabels").entries() {
        reqs.push((k.to_owned(), format!("{k}={}", v.str())));
    }
    for e in sel.get("matchExpressions").items() {
        let key = e.get("key").str();
        let mut values: Vec<&str> = e.get("values").items().map(J::str).collect();
        values.sort_unstable();
        let list = values.join(",");
        let text = match e.get("operator").str() {
            "In" if !values.is_empty() => format!("{key} in ({list})"),
            "NotIn" if !values.is_empty() => format!("{key} notin ({list})"),
            "Exists" if values.is_empty() => key.to_owned(),
            "DoesNotExist" if values.is_empty() => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key.to_owned(), text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(","))
}

/// `metav1.FormatLabelSelector`: the selector's string, `<none>` when empty, `<error>` when invalid.
fn format_label_selector(sel: J<'_>) -> String {
    match label_selector_string(sel) {
        Err(()) => "<error>".to_owned(),
        Ok(s) if s.is_empty() => "<none>".to_owned(),
        Ok(s) => s,
    }
}

/// `layoutContainerCells`: container names and images, each joined by commas.
fn container_cells(containers: J<'_>) -> (String, String) {
    let names: Vec<&str> = containers.items().map(|c| c.get("name").str()).collect();
    let images: Vec<&str> = containers.items().map(|c| c.get("image").str()).collect();
    (names.join(","), images.join(","))
}

/// `printBoolPtr`: `True`, `False` or `<unset>`.
fn bool_ptr(j: J<'_>) -> String {
    match j.opt_bool() {
        Some(true) => "True".to_owned(),
        Some(false) => "False".to_owned(),
        None => "<unset>".to_owned(),
    }
}

/// A `resource.Quantity` value as printed; Go's zero Quantity prints `0`.
fn quantity(j: J<'_>) -> String {
    match j {
        J::Val(Value::String(s)) => s.clone(),
        J::Val(Value::Number(n)) => n.to_string(),
        _ => "0".to_owned(),
    }
}

/// A `*resource.Quantity` as printed: `<nil>` when absent.
fn quantity_ptr(j: J<'_>) -> String {
    if j.is_set() {
        quantity(j)
    } else {
        "<nil>".to_owned()
    }
}

/// An `IntOrString` as printed.
fn int_or_string(j: J<'_>) -> String {
    match j {
        J::Val(Value::String(s)) => s.clone(),
        J::Val(Value::Number(n)) => n.to_string(),
        _ => "0".to_owned(),
    }
}

/// `listWithMoreString`: the first `max` entries, `+ N more...`, or `<unset>` when empty.
fn list_with_more(list: &[String], more: bool, count: usize, max: usize) -> String {
    let ret = list.join(",");
    if more {
        return format!("{ret} + {} more...", count - max);
    }
    if ret.is_empty() {
        "<unset>".to_owned()
    } else {
        ret
    }
}

/// The first condition of `conditions` whose `type` is `kind`.
fn condition<'a>(conditions: J<'a>, kind: &str) -> Option<J<'a>> {
    conditions.items().find(|c| c.get("type").str() == kind)
}

#[cfg(test)]
mod tests;
