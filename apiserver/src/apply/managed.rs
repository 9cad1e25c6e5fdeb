//! `metadata.managedFields`: one entry per manager, operation (`Apply`, `Update`),
//! apiVersion and subresource, with the time of its last change and its `FieldsV1` set.
//! [`record_update`] is what every create, update and patch does; [`apply`] is server-side
//! apply (conflicts, `force`, removal of fields a manager stopped applying).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{Map, Value, json};

use super::fieldset::{self, Set};
use super::merge;
use crate::patch::schema::Ty;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The field manager.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion the manager wrote.
    pub api_version: String,
    /// RFC 3339 time of the last change.
    pub time: String,
    /// The subresource (`status`) or empty.
    pub subresource: String,
    /// The fields owned.
    pub fields: Set,
}

/// Fields no manager owns: identity, server-set metadata, and status (the main resource).
const IGNORED: &[&str] = &["apiVersion", "kind", "status"];
const IGNORED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
];

/// `obj` without the fields no manager owns.
pub fn owned_part(obj: &Map<String, Value>) -> Map<String, Value> {
    let mut out = obj.clone();
    for k in IGNORED {
        out.remove(*k);
    }
    if let Some(Value::Object(meta)) = out.get_mut("metadata") {
        for k in IGNORED_META {
            meta.remove(*k);
        }
        if meta.is_empty() {
            out.remove("metadata");
        }
    }
    out
}

/// The part of `obj` a write through `subresource` can own: status alone for `status`
/// (upstream's status strategies reset everything else), [`owned_part`] otherwise.
/// Whether writes through `subresource` own fields of `status` (the `status` subresource, and
/// a CSR's `approval`, which writes `status.conditions`) rather than of the rest.
fn status_side(subresource: &str) -> bool {
    matches!(subresource, "status" | "approval")
}

fn owned_part_in(obj: &Map<String, Value>, subresource: &str) -> Map<String, Value> {
    if status_side(subresource) {
        obj.get("status")
            .map(|s| Map::from_iter([("status".to_owned(), s.clone())]))
            .unwrap_or_default()
    } else {
        owned_part(obj)
    }
}

/// The entries of `obj`'s `metadata.managedFields` (malformed entries are dropped).
pub fn entries(obj: &Map<String, Value>) -> Vec<Entry> {
    let list = obj
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .filter_map(|e| entry_from(e, true))
        .collect()
}

/// One stored entry; its set is parsed only with `parse` (else left empty). `None` when
/// the entry is malformed.
fn entry_from(e: &Value, parse: bool) -> Option<Entry> {
    let str_of = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let fields = e.get("fieldsV1")?;
    Some(Entry {
        manager: str_of("manager"),
        operation: str_of("operation"),
        api_version: str_of("apiVersion"),
        time: str_of("time"),
        subresource: str_of("subresource"),
        fields: if parse {
            Set::from_json(fields)?
        } else {
            Set::default()
        },
    })
}

/// Writes `entries` (those with fields) into `obj`'s metadata.
pub fn store(obj: &mut Map<String, Value>, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(entry_json)
        .collect();
    put(obj, list);
}

/// One entry as `managedFields` spells it.
fn entry_json(e: &Entry) -> Value {
    let mut v = json!({
        "manager": e.manager,
        "operation": e.operation,
        "apiVersion": e.api_version,
        "time": e.time,
        "fieldsType": "FieldsV1",
        "fieldsV1": e.fields.to_json(),
    });
    if !e.subresource.is_empty() {
        v["subresource"] = json!(e.subresource);
    }
    v
}

/// Sets `obj`'s `metadata.managedFields` to `list` (removed when empty), in upstream's
/// order ([`sort_entries`]).
fn put(obj: &mut Map<String, Value>, mut list: Vec<Value>) {
    sort_entries(&mut list);
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Orders entries as upstream's field manager writes them (`sortEncodedManagedFields`): by
/// operation (`Apply` before `Update`), then by time in whole seconds (oldest first; an
/// entry without a readable time counts as 0), then by manager, apiVersion and subresource.
/// So a controller's status entry written in the same second as the create comes before
/// `kubectl-create` by name, and after it when written a second later.
pub fn sort_entries(list: &mut [Value]) {
    let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let seconds = |e: &Value| {
        e.get("time")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map_or(0, |t| t.as_second())
    };
    list.sort_by_cached_key(|e| {
        (
            text(e, "operation"),
            seconds(e),
            text(e, "manager"),
            text(e, "apiVersion"),
            text(e, "subresource"),
        )
    });
}

/// Now, as managedFields times are written (seconds).
pub fn now() -> String {
    let ts = jiff::Timestamp::now();
    jiff::Timestamp::from_second(ts.as_second()).map_or_else(|_| ts.to_string(), |t| t.to_string())
}

/// Upstream's default manager for a User-Agent: the program name before the first `/`.
pub fn default_manager(user_agent: &str) -> String {
    let name = user_agent.split('/').next().unwrap_or("").trim();
    let name: String = name.chars().take(128).collect();
    if name.is_empty() {
        "unknown".into()
    } else {
        name
    }
}

/// Records an Update operation by `manager` that turned `old` (empty for a create) into
/// `new`: the manager gains the fields it changed, others lose them, and fields `new` no
/// longer has leave every set. Writes the entries into `new`. `subresource` is empty for
/// the object itself, else `status` or `scale` (the entry carries it, as upstream's do).
pub fn record_update(
    new: &mut Map<String, Value>,
    old: &Map<String, Value>,
    ty: Ty,
    manager: &str,
    api_version: &str,
    subresource: &str,
) {
    // managedFields set by the request itself (and different from the stored ones) are kept
    // as they are, as upstream does; server-side apply's creates come this way.
    let given = new.get("metadata").and_then(|m| m.get("managedFields"));
    let stored = old.get("metadata").and_then(|m| m.get("managedFields"));
    if given.is_some() && given != stored {
        return;
    }
    let carried = given.is_some();
    // Upstream compares typed objects: what `old` lacks but Go always writes (a create's
    // `old` is the kind's zero value) is there, so only pointers, `omitempty` fields, list
    // items and map entries can be added (and marked `.`).
    let old_part = owned_part_in(&with_go_zero(old, new), subresource);
    let new_part = owned_part_in(new, subresource);
    let changed = merge::changed(&old_part, &new_part, ty);
    // Status entries and the others own disjoint parts: a write checks the part it sees.
    let sees = |sub: &str| status_side(subresource) == status_side(sub);
    let stored_list = stored.and_then(Value::as_array);
    // The fields `new` still has; only needed when some entry is checked against them
    // (never on a create).
    let existing = stored_list
        .into_iter()
        .flatten()
        .any(|e| sees(e.get("subresource").and_then(Value::as_str).unwrap_or("")))
        .then(|| merge::existing(&new_part, ty));
    // When the request carried the stored entries back, one this write cannot touch (none
    // of its top-level fields changed, and it is not checked against `existing`) is
    // written back as carried without parsing its set: a status write leaves the
    // controller's entry for the spec alone.
    let mut list = Vec::new();
    let mut same = Vec::new();
    let mut unparsed = Vec::new();
    for raw in stored_list.into_iter().flatten() {
        let sub = raw.get("subresource").and_then(Value::as_str).unwrap_or("");
        let untouched = carried
            && !changed.member
            && !(existing.is_some() && sees(sub))
            && raw
                .get("fieldsV1")
                .and_then(Value::as_object)
                .is_some_and(|m| m.keys().all(|k| !changed.children.contains_key(k)));
        if let Some(e) = entry_from(raw, !untouched) {
            list.push(e);
            same.push(untouched);
            unparsed.push(untouched);
        }
    }
    let mut originals: Vec<Value> = match object_meta_mut(new).map(|m| m.remove("managedFields")) {
        Some(Some(Value::Array(a))) if carried && a.len() == list.len() => a,
        Some(Some(other)) => {
            if let Some(m) = object_meta_mut(new) {
                m.insert("managedFields".into(), other);
            }
            Vec::new()
        }
        _ => Vec::new(),
    };
    if originals.is_empty() && unparsed.contains(&true) {
        // Positions did not match after all: every set is needed.
        list = entries(old);
        same = vec![false; list.len()];
        unparsed = vec![false; list.len()];
    }
    for ((e, same), unparsed) in list.iter_mut().zip(same.iter_mut()).zip(&unparsed) {
        if *unparsed {
            continue;
        }
        let mut fields = e.fields.difference(&changed);
        if let Some(existing) = existing.as_ref().filter(|_| sees(&e.subresource)) {
            fields = fields.intersection(existing);
        }
        *same = fields == e.fields;
        e.fields = fields;
    }
    if !changed.is_empty() {
        let at = list.iter().position(|e| {
            e.manager == manager
                && e.operation == "Update"
                && e.api_version == api_version
                && e.subresource == subresource
        });
        match at {
            Some(i) => {
                if unparsed.get(i) == Some(&true)
                    && let Some(fields) = stored_list
                        .and_then(|l| l.get(i))
                        .and_then(|e| e.get("fieldsV1"))
                        .and_then(Set::from_json)
                {
                    list[i].fields = fields;
                }
                list[i].fields = list[i].fields.union(&changed);
                list[i].time = now();
                same[i] = false;
            }
            None => list.push(Entry {
                manager: manager.into(),
                operation: "Update".into(),
                api_version: api_version.into(),
                time: now(),
                subresource: subresource.into(),
                fields: changed,
            }),
        }
    }
    if originals.is_empty() {
        store(new, &list);
        return;
    }
    let out: Vec<Value> = list
        .iter()
        .enumerate()
        .filter(|(i, e)| same.get(*i) == Some(&true) || !e.fields.is_empty())
        .map(|(i, e)| match originals.get_mut(i) {
            Some(v) if same[i] => std::mem::take(v),
            _ => entry_json(e),
        })
        .collect();
    put(new, out);
}

/// The Go zero value of each kind, by apiVersion and kind.
type ZeroObjects = HashMap<(String, String), Map<String, Value>>;

/// `old` with the fields Go's encoder always writes for the kind of `new` (non-pointer
/// structs, and nil slices, maps and pointers without `omitempty` as `null`) where `old`
/// lacks them; unchanged for kinds the codec has no Go type of (custom resources).
fn with_go_zero(old: &Map<String, Value>, new: &Map<String, Value>) -> Map<String, Value> {
    static ZEROS: OnceLock<Mutex<ZeroObjects>> = OnceLock::new();
    let str_of = |k: &str| new.get(k).or_else(|| old.get(k)).and_then(Value::as_str);
    let (Some(api_version), Some(kind)) = (str_of("apiVersion"), str_of("kind")) else {
        return old.clone();
    };
    let key = (api_version.to_owned(), kind.to_owned());
    let zeros = ZEROS.get_or_init(Mutex::default);
    let cached = zeros.lock().ok().and_then(|z| z.get(&key).cloned());
    let zero = cached.unwrap_or_else(|| {
        let typed = json!({ "apiVersion": api_version, "kind": kind });
        let written = crate::codec::go_json::to_vec(&typed);
        let zero: Map<String, Value> = serde_json::from_slice(&written).unwrap_or_default();
        if let Ok(mut z) = zeros.lock() {
            z.insert(key, zero.clone());
        }
        zero
    });
    let mut out = old.clone();
    fill(&mut out, &zero);
    out
}

/// Adds the fields of `zero` that `into` lacks, recursively through objects both have.
fn fill(into: &mut Map<String, Value>, zero: &Map<String, Value>) {
    for (k, z) in zero {
        match (into.get_mut(k), z) {
            (None, _) => {
                into.insert(k.clone(), z.clone());
            }
            (Some(Value::Object(mine)), Value::Object(z)) => fill(mine, z),
            _ => {}
        }
    }
}

/// `obj`'s `metadata` map, if it has one.
fn object_meta_mut(obj: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    obj.get_mut("metadata").and_then(Value::as_object_mut)
}

/// A conflict: the other manager, its apiVersion, and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager owning the field.
    pub manager: String,
    /// The apiVersion of its entry.
    pub api_version: String,
    /// The field, as upstream prints it (`.spec.replicas`).
    pub field: String,
    /// The field's path.
    pub path: Vec<String>,
    /// The operation of its entry (`Apply` or `Update`).
    pub operation: String,
    /// The subresource of its entry (empty for the object itself).
    pub subresource: String,
}

impl Conflict {
    /// The other manager as upstream's `printManager` words it: `"m"` for an applier,
    /// `"m" using apps/v1` for an updater, with `with subresource "scale"` after the name.
    pub fn manager_display(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == "Update" {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

/// Applies `config` by `manager` onto `live` (an empty map when the object does not exist
/// yet); returns the merged object with its managedFields, or the conflicts.
pub fn apply(
    live: &Map<String, Value>,
    config: &Map<String, Value>,
    ty: Ty,
    manager: &str,
    api_version: &str,
    force: bool,
) -> Result<Map<String, Value>, Vec<Conflict>> {
    apply_to(live, config, ty, manager, api_version, force, "")
}

/// [`apply`] through `subresource` (empty for the object itself; `status` applies and owns
/// status only, in an entry with `subresource: status`).
pub fn apply_to(
    live: &Map<String, Value>,
    config: &Map<String, Value>,
    ty: Ty,
    manager: &str,
    api_version: &str,
    force: bool,
    subresource: &str,
) -> Result<Map<String, Value>, Vec<Conflict>> {
    let status_side = |e: &Entry| status_side(&e.subresource) == status_side(subresource);
    let mut list = entries(live);
    let config_part = owned_part_in(config, subresource);
    let applied = merge::object_set(&config_part, ty);
    let live_value = Value::Object(live.clone());
    let config_value = Value::Object(config.clone());
    let mine = |e: &Entry| {
        e.manager == manager
            && e.operation == "Apply"
            && e.api_version == api_version
            && e.subresource == subresource
    };
    // Conflicts: fields others own whose live value differs from the applied one.
    let mut conflicts = Vec::new();
    for e in list.iter_mut().filter(|e| !mine(e) && status_side(e)) {
        let both = applied.intersection(&e.fields);
        let mut taken = Set::default();
        for path in both.paths() {
            // Only values are compared: a list item or map node is owned through its fields.
            if subtree(&applied, &path).is_some_and(|s| !s.children.is_empty()) {
                continue;
            }
            if merge::get(&live_value, &path) != merge::get(&config_value, &path) {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    field: fieldset::display(&path),
                    path: path.clone(),
                    operation: e.operation.clone(),
                    subresource: e.subresource.clone(),
                });
                taken.insert(&path);
            }
        }
        if force {
            e.fields = e.fields.difference(&taken);
        }
    }
    if !conflicts.is_empty() && !force {
        if !from_last_applied(live, &conflicts, ty) {
            return Err(conflicts);
        }
        // Upstream's last-applied manager: conflicts that are all in the client-side apply's
        // last-applied configuration are the migration to server-side apply; apply forced.
        return apply_to(live, config, ty, manager, api_version, true, subresource);
    }
    let previous = list
        .iter()
        .find(|e| mine(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others = list
        .iter()
        .filter(|e| !mine(e) && status_side(e))
        .fold(Set::default(), |acc, e| acc.union(&e.fields));
    let mut merged = Value::Object(merge::apply(live, config, ty));
    // Fields the manager stopped applying, owned by nobody else, are removed.
    for path in previous.difference(&applied).paths() {
        let owned_below = subtree(&others, &path).is_some_and(|s| !s.is_empty());
        if !owned_below {
            merge::remove(&mut merged, &path);
        }
    }
    let Value::Object(mut merged) = merged else {
        return Ok(live.clone());
    };
    list.retain(|e| !mine(e));
    list.push(Entry {
        manager: manager.into(),
        operation: "Apply".into(),
        api_version: api_version.into(),
        time: now(),
        subresource: subresource.into(),
        fields: applied,
    });
    let existing = merge::existing(&owned_part_in(&merged, subresource), ty);
    // Status entries own what the object's own writes never see (as in `record_update`).
    for e in list.iter_mut().filter(|e| status_side(e)) {
        e.fields = e.fields.intersection(&existing);
    }
    store(&mut merged, &list);
    Ok(merged)
}

/// Whether every conflict is a field of `live`'s `kubectl.kubernetes.io/last-applied-configuration`.
fn from_last_applied(live: &Map<String, Value>, conflicts: &[Conflict], ty: Ty) -> bool {
    let last = live
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get("kubectl.kubernetes.io/last-applied-configuration"))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Map<String, Value>>(s).ok());
    let Some(last) = last else {
        return false;
    };
    let set = merge::object_set(&owned_part(&last), ty);
    conflicts.iter().all(|c| set.has(&c.path))
}

fn subtree<'a>(set: &'a Set, path: &[String]) -> Option<&'a Set> {
    match path.split_first() {
        None => Some(set),
        Some((first, rest)) => subtree(set.children.get(first)?, rest),
    }
}

/// Upstream's conflict message: `Apply failed with 1 conflict: conflict with "m" using
/// apps/v1: .spec.replicas`.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    let n = conflicts.len();
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.manager_display(),
            c.field
        );
    }
    // Grouped by manager, in the order of upstream's manager identifiers (JSON of manager,
    // operation, apiVersion for updaters, subresource).
    let key = |c: &Conflict| {
        let version = if c.operation == "Update" {
            c.api_version.clone()
        } else {
            String::new()
        };
        (
            c.manager.clone(),
            c.operation.clone(),
            version,
            c.subresource.clone(),
        )
    };
    let mut groups: Vec<(_, String, Vec<&str>)> = Vec::new();
    for c in conflicts {
        let k = key(c);
        match groups.iter_mut().find(|g| g.0 == k) {
            Some(g) => g.2.push(&c.field),
            None => groups.push((k, c.manager_display(), vec![&c.field])),
        }
    }
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    let parts: Vec<String> = groups
        .iter()
        .map(|(_, who, fields)| {
            let list: Vec<String> = fields.iter().map(|f| format!("- {f}")).collect();
            format!("conflicts with {who}:\n{}", list.join("\n"))
        })
        .collect();
    format!("Apply failed with {n} conflicts: {}", parts.join("\n"))
}
