//! Structured merge on JSON objects, driven by the list/map metadata of the Go types
//! (`patch::schema`): the field set of an object, the fields an update changed, applying a
//! configuration onto a live object, reading and removing a field by path.
//!
//! Lists are `map` (keyed by `+listMapKey`, or by the patch merge key of a `merge` list),
//! `set` or atomic (the default); maps and structs are granular unless marked atomic. Objects
//! under fields without metadata (labels, annotations, …) are granular maps.

use serde_json::{Map, Value};

use super::fieldset::{self, Set};
use crate::patch::schema::{FieldMeta, Strategy, Ty, struct_type};

/// How the items of a list are identified.
enum ListKind {
    /// Keyed by these fields.
    Map(Vec<&'static str>),
    /// Scalars identified by value.
    Set,
    /// Replaced as a whole.
    Atomic,
}

fn list_kind(meta: &FieldMeta) -> ListKind {
    match meta.list_type {
        Some("map") => ListKind::Map(meta.list_keys.unwrap_or("").split(',').collect()),
        Some("set") => ListKind::Set,
        Some(_) => ListKind::Atomic,
        None if meta.strategy == Strategy::Merge => match meta.merge_key {
            Some(k) => ListKind::Map(vec![k]),
            None => ListKind::Set,
        },
        None => ListKind::Atomic,
    }
}

/// Whether the object value of a field is one unit.
fn atomic_object(meta: &FieldMeta) -> bool {
    meta.map_type == Some("atomic") || meta.elem.and_then(struct_type) == Some("atomic")
}

/// The key path element of a list item (`None` if it is not an object).
fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
    let obj = item.as_object()?;
    let mut fields = Map::new();
    for k in keys {
        match obj.get(*k) {
            Some(v) => {
                fields.insert((*k).to_owned(), v.clone());
            }
            // Upstream's schemas default the protocol key of ports (`"default": "TCP"`).
            None if *k == "protocol" => {
                fields.insert((*k).to_owned(), Value::String("TCP".into()));
            }
            None => {}
        }
    }
    Some(fieldset::key(&fields))
}

fn item_element(item: &Value, kind: &ListKind, index: usize) -> String {
    match kind {
        ListKind::Map(keys) => item_key(item, keys).unwrap_or_else(|| format!("i:{index}")),
        ListKind::Set => fieldset::value(item),
        ListKind::Atomic => format!("i:{index}"),
    }
}

/// The field set of `obj` (an object of type `ty`), as structured-merge-diff's `ToFieldSet`.
pub fn object_set(obj: &Map<String, Value>, ty: Ty) -> Set {
    let mut set = Set::default();
    for (k, v) in obj {
        let meta = ty.field(k);
        let mut child = value_set(v, &meta);
        // Map entries (fields not declared by a struct) and empty values are members.
        let declared = ty.declares(k);
        if !declared || child.is_empty() {
            child.member = true;
        }
        set.children.insert(fieldset::field(k), child);
    }
    set
}

fn value_set(v: &Value, meta: &FieldMeta) -> Set {
    match v {
        Value::Object(m) if !atomic_object(meta) => object_set(m, meta.value_ty()),
        Value::Array(items) => match list_kind(meta) {
            ListKind::Atomic => Set::default(),
            kind => {
                let mut set = Set::default();
                for (i, item) in items.iter().enumerate() {
                    let mut child = match (&kind, item) {
                        (ListKind::Map(_), Value::Object(m)) => object_set(m, meta.item_ty()),
                        _ => Set::default(),
                    };
                    child.member = true;
                    set.children.insert(item_element(item, &kind, i), child);
                }
                set
            }
        },
        _ => Set::default(),
    }
}

/// The fields an update from `old` to `new` added or changed (structured-merge-diff's
/// comparison), for the manager of an Update operation. A node `old` lacks is added with
/// its whole subtree, every node a member (`.` on a new list item, map or pointer struct);
/// a node `old` has (even as `null`, as Go writes nil slices) is compared below itself.
pub fn changed(old: &Map<String, Value>, new: &Map<String, Value>, ty: Ty) -> Set {
    let mut set = Set::default();
    for (k, v) in new {
        let meta = ty.field(k);
        let child = match old.get(k) {
            // `ObjectMeta` is a non-pointer struct wherever it is: never added itself.
            None if k == "metadata" => changed_value(&Value::Null, v, &meta),
            None => added(v, &meta),
            Some(o) => changed_value(o, v, &meta),
        };
        if !child.is_empty() {
            set.children.insert(fieldset::field(k), child);
        }
    }
    set
}

/// The set of a value that is new in an update: the node and everything below it (an
/// atomic value is one leaf).
fn added(v: &Value, meta: &FieldMeta) -> Set {
    let mut set = match v {
        Value::Object(m) if !atomic_object(meta) => added_object(m, meta.value_ty()),
        Value::Array(items) => match list_kind(meta) {
            ListKind::Atomic => Set::default(),
            kind => {
                let mut set = Set::default();
                for (i, item) in items.iter().enumerate() {
                    set.children
                        .insert(item_element(item, &kind, i), added_item(item, &kind, meta));
                }
                set
            }
        },
        _ => Set::default(),
    };
    set.member = true;
    set
}

fn added_object(m: &Map<String, Value>, ty: Ty) -> Set {
    let mut set = Set::default();
    for (k, v) in m {
        set.children
            .insert(fieldset::field(k), added(v, &ty.field(k)));
    }
    set
}

/// A new list item: its fields too when it is an associative list's object.
fn added_item(item: &Value, kind: &ListKind, meta: &FieldMeta) -> Set {
    let mut set = match (kind, item) {
        (ListKind::Map(_), Value::Object(m)) => added_object(m, meta.item_ty()),
        _ => Set::default(),
    };
    set.member = true;
    set
}

fn changed_value(old: &Value, new: &Value, meta: &FieldMeta) -> Set {
    static NO_ITEMS: Vec<Value> = Vec::new();
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if !atomic_object(meta) => {
            changed(o, n, meta.value_ty())
        }
        // Go's nil map or pointer (`null`) then a value: its fields are added, not the node.
        (Value::Null, Value::Object(n)) if !atomic_object(meta) => {
            changed(&Map::new(), n, meta.value_ty())
        }
        (Value::Array(_) | Value::Null, Value::Array(n))
            if !matches!(list_kind(meta), ListKind::Atomic) =>
        {
            let o = old.as_array().unwrap_or(&NO_ITEMS);
            let kind = list_kind(meta);
            let mut set = Set::default();
            for (i, item) in n.iter().enumerate() {
                let element = item_element(item, &kind, i);
                let before = o
                    .iter()
                    .enumerate()
                    .find(|(j, x)| item_element(x, &kind, *j) == element);
                let child = match (before, item) {
                    (None, _) => added_item(item, &kind, meta),
                    (Some((_, Value::Object(bo))), Value::Object(bn)) => {
                        changed(bo, bn, meta.item_ty())
                    }
                    (Some((_, b)), _) if b != item => leaf(),
                    _ => Set::default(),
                };
                if !child.is_empty() {
                    set.children.insert(element, child);
                }
            }
            set
        }
        _ if old != new => leaf(),
        _ => Set::default(),
    }
}

fn leaf() -> Set {
    Set {
        member: true,
        ..Set::default()
    }
}

/// Every path of `obj` (every node a member): intersecting a set with it drops the paths
/// the object no longer has.
pub fn existing(obj: &Map<String, Value>, ty: Ty) -> Set {
    let mut set = Set::default();
    for (k, v) in obj {
        let meta = ty.field(k);
        let mut child = match v {
            Value::Object(m) => existing(m, meta.value_ty()),
            Value::Array(items) => {
                let kind = list_kind(&meta);
                let mut s = Set::default();
                for (i, item) in items.iter().enumerate() {
                    let mut c = match item {
                        Value::Object(m) => existing(m, meta.item_ty()),
                        _ => Set::default(),
                    };
                    c.member = true;
                    s.children.insert(item_element(item, &kind, i), c);
                }
                s
            }
            _ => Set::default(),
        };
        child.member = true;
        set.children.insert(fieldset::field(k), child);
    }
    set
}

/// Applies the configuration `applied` onto `live` (both objects of type `ty`).
pub fn apply(
    live: &Map<String, Value>,
    applied: &Map<String, Value>,
    ty: Ty,
) -> Map<String, Value> {
    let mut out = live.clone();
    for (k, av) in applied {
        let meta = ty.field(k);
        let merged = match out.get(k) {
            Some(lv) => merge_value(lv, av, &meta),
            None => av.clone(),
        };
        out.insert(k.clone(), merged);
    }
    out
}

fn merge_value(live: &Value, applied: &Value, meta: &FieldMeta) -> Value {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) if !atomic_object(meta) => {
            Value::Object(apply(l, a, meta.value_ty()))
        }
        (Value::Array(l), Value::Array(a)) => match list_kind(meta) {
            ListKind::Atomic => applied.clone(),
            kind => {
                let mut out = l.clone();
                for (i, item) in a.iter().enumerate() {
                    let element = item_element(item, &kind, i);
                    let found = out
                        .iter()
                        .enumerate()
                        .position(|(j, x)| item_element(x, &kind, j) == element);
                    match (found, &kind) {
                        (Some(j), ListKind::Map(_)) => {
                            out[j] = match (&out[j], item) {
                                (Value::Object(lo), Value::Object(ao)) => {
                                    Value::Object(apply(lo, ao, meta.item_ty()))
                                }
                                _ => item.clone(),
                            };
                        }
                        (Some(_), _) => {}
                        (None, _) => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
        },
        _ => applied.clone(),
    }
}

/// The value at `path` in `obj`.
pub fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let Some((first, rest)) = path.split_first() else {
        return Some(obj);
    };
    get(child(obj, first)?, rest)
}

fn child<'a>(v: &'a Value, element: &str) -> Option<&'a Value> {
    match (v, element.split_once(':')?) {
        (Value::Object(m), ("f", name)) => m.get(name),
        (Value::Array(items), (_, _)) => items.get(index_of(items, element)?),
        _ => None,
    }
}

fn index_of(items: &[Value], element: &str) -> Option<usize> {
    match element.split_once(':')? {
        ("i", n) => n.parse().ok(),
        ("v", json) => {
            let want: Value = serde_json::from_str(json).ok()?;
            items.iter().position(|x| *x == want)
        }
        ("k", json) => {
            let want: Map<String, Value> = serde_json::from_str(json).ok()?;
            items.iter().position(|x| {
                want.iter().all(|(k, v)| {
                    let got = x.get(k);
                    got == Some(v) || (got.is_none() && k == "protocol" && v == "TCP")
                })
            })
        }
        _ => None,
    }
}

/// Removes the value at `path` from `obj`, if there.
pub fn remove(obj: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for element in parent {
        let next = match (cur, element.split_once(':')) {
            (Value::Object(m), Some(("f", name))) => m.get_mut(name),
            (Value::Array(items), Some(_)) => match index_of(items, element) {
                Some(i) => items.get_mut(i),
                None => None,
            },
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (cur, last.split_once(':')) {
        (Value::Object(m), Some(("f", name))) => {
            m.remove(name);
        }
        (Value::Array(items), Some(_)) => {
            if let Some(i) = index_of(items, last) {
                items.remove(i);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
