//! The strategic-merge-patch engine, as upstream's `strategicpatch.StrategicMergeMapPatch`
//! applies a patch on the server (parallel deletion lists merged, unmatched nulls ignored).
//!
//! Maps merge recursively and `null` deletes a key. Lists are replaced unless the field's
//! strategy is `merge`: lists of objects then merge by the field's merge key, lists of
//! primitives become a set union. Directives: `$patch: replace|delete` (in a map or as a list
//! item), `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.
//! Merged lists keep upstream's order: patch items in patch (or `$setElementOrder`) order,
//! server-only items interleaved where the live list had them.

use serde_json::{Map, Value};

use super::gofmt;
use super::schema::{FieldMeta, Strategy, Ty};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList";

/// Why a patch could not be applied; the variant says how upstream answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmpError {
    /// A malformed directive (upstream's `mergepatch` sentinel errors): 400 BadRequest.
    BadRequest(String),
    /// Lists of lists: 422 upstream.
    Unprocessable(String),
    /// Any other failure (missing merge key, mismatched types), which upstream answers 500.
    Other(String),
}

type Result<T> = std::result::Result<T, SmpError>;
type Object = Map<String, Value>;

/// Applies `patch` to `original`, an object of type `ty`.
pub fn apply(original: Object, patch: Object, ty: Ty) -> Result<Object> {
    merge_map(original, patch, ty)
}

fn no_merge_key(m: &Object, key: &str) -> SmpError {
    SmpError::Other(format!(
        "map: {} does not contain declared merge key: {key}",
        gofmt::map(m)
    ))
}

fn bad_arg(expected: &str, actual: &Value) -> SmpError {
    SmpError::Other(format!(
        "expected a {expected}, but received a {}",
        gofmt::type_name(actual)
    ))
}

fn bad_patch_type(directive: &Value, m: &Object) -> SmpError {
    SmpError::Other(format!(
        "unknown patch type: {} in map: {}",
        gofmt::value(directive),
        gofmt::map(m)
    ))
}

/// `<prefix>/<field>` → `<field>`, with upstream's error for a malformed key.
fn extract_key<'a>(key: &'a str, prefix: &str) -> Result<&'a str> {
    match key.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest),
        _ if prefix == DELETE_PRIMITIVE => Err(SmpError::BadRequest(
            "invalid patch format of primitive list".into(),
        )),
        _ => Err(SmpError::BadRequest(
            "invalid patch format of setElementOrder list".into(),
        )),
    }
}

fn merge_map(mut original: Object, mut patch: Object, ty: Ty) -> Result<Object> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(patch)
            }
            Some("delete") => Ok(Object::new()),
            _ => Err(bad_patch_type(directive, &patch)),
        };
    }
    retain_keys(&mut original, &mut patch)?;
    set_element_order(&mut original, &mut patch, ty)?;
    for (key, patch_value) in patch {
        let (key, delete_list) = if key.starts_with(DELETE_PRIMITIVE) {
            (extract_key(&key, DELETE_PRIMITIVE)?.to_owned(), true)
        } else {
            (key, false)
        };
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let Some(original_value) = original.remove(&key) else {
            if !delete_list {
                insert_new(&mut original, key, patch_value);
            }
            continue;
        };
        let meta = ty.field(&key);
        match (original_value, patch_value) {
            (Value::Object(o), Value::Object(p)) => {
                let merged = if meta.strategy == Strategy::Replace {
                    p
                } else {
                    merge_map(o, p, meta.value_ty())?
                };
                original.insert(key, Value::Object(merged));
            }
            (Value::Array(o), Value::Array(p)) => {
                let merged = if meta.strategy == Strategy::Merge || delete_list {
                    merge_slice(o, p, &meta, delete_list)?
                } else {
                    p
                };
                original.insert(key, Value::Array(merged));
            }
            (o, _) if delete_list => {
                original.insert(key, o);
            }
            (_, p) => insert_new(&mut original, key, p),
        }
    }
    Ok(original)
}

/// Takes a patch value as is (nulls dropped, directives removed).
fn insert_new(original: &mut Object, key: String, mut value: Value) {
    discard_nulls(&mut value);
    if let Some(v) = remove_directives(value) {
        original.insert(key, v);
    }
}

fn discard_nulls(value: &mut Value) {
    match value {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(discard_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

/// Drops directives from a value taken whole; `None` if the value itself is one.
fn remove_directives(value: Value) -> Option<Value> {
    match value {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

/// `$retainKeys`: keys of `original` not listed are cleared; every key the patch sets must
/// be listed.
fn retain_keys(original: &mut Object, patch: &mut Object) -> Result<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let bad = || SmpError::BadRequest("invalid patch format of retainKeys".into());
    let Value::Array(list) = retain else {
        return Err(bad());
    };
    let listed = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_PRIMITIVE) || k.starts_with(SET_ORDER) {
            continue;
        }
        if !listed(k) {
            return Err(bad());
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

fn as_list(value: Option<Value>) -> Result<Option<Vec<Value>>> {
    match value {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(other) => Err(bad_arg("[]interface {}", &other)),
    }
}

/// `$setElementOrder/<list>`: merges the list (if patched) and orders it as the directive
/// says, server-only items kept where they were.
fn set_element_order(original: &mut Object, patch: &mut Object, ty: Ty) -> Result<()> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.remove(&key) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(bad_arg("[]interface {}", &order));
        };
        let field = extract_key(&key, SET_ORDER)?.to_owned();
        let original_list = as_list(original.get(&field).cloned())?;
        let patch_list = as_list(patch.get(&field).cloned())?;
        let meta = ty.field(&field);
        let merge_key = meta.merge_key.unwrap_or("");
        validate_order(patch_list.as_deref().unwrap_or(&[]), &order, merge_key)?;
        let patch_items_all = patch_list.clone().unwrap_or_default();
        let merged = match (&original_list, patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => p.into_iter().filter_map(remove_directives).collect(),
            (Some(o), Some(p)) => {
                if meta.strategy == Strategy::Merge {
                    merge_slice(o.clone(), p, &meta, false)?
                } else {
                    p
                }
            }
            (None, None) => continue,
        };
        let (patch_items, server_only) = partition(merged, &order, merge_key)?;
        let kind = element_kind(&[original_list.as_deref().unwrap_or(&[]), &patch_items_all])?;
        let server_order = original_list.unwrap_or_default();
        let all = normalize_order(
            patch_items,
            server_only,
            &order,
            &server_order,
            merge_key,
            kind,
        )?;
        original.insert(field.clone(), Value::Array(all));
        patch.remove(&field);
    }
    Ok(())
}

/// Upstream's check that the patch list follows the `$setElementOrder` list.
fn validate_order(patch_list: &[Value], order: &[Value], merge_key: &str) -> Result<()> {
    if patch_list.is_empty() || order.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = if merge_key.is_empty() {
        patch_list.iter().collect()
    } else {
        let mut kept = Vec::new();
        for v in patch_list {
            let Value::Object(m) = v else {
                return Err(bad_arg("map[string]interface {}", v));
            };
            if m.get(DIRECTIVE).and_then(Value::as_str) != Some("delete") {
                kept.push(v);
            }
        }
        kept
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        let item = non_delete[pi];
        if item.as_object().is_some_and(|m| m.contains_key(DIRECTIVE)) {
            pi += 1;
            continue;
        }
        if key_equal(item, &order[oi], merge_key)? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(SmpError::Other(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ORDER} list:\n{}\n",
            gofmt::value(&Value::Array(patch_list.to_vec())),
            gofmt::value(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

fn key_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let l = left
        .as_object()
        .ok_or_else(|| bad_arg("map[string]interface {}", left))?;
    let r = right
        .as_object()
        .ok_or_else(|| bad_arg("map[string]interface {}", right))?;
    let lv = l.get(merge_key).ok_or_else(|| no_merge_key(l, merge_key))?;
    let rv = r.get(merge_key).ok_or_else(|| no_merge_key(r, merge_key))?;
    Ok(lv == rv)
}

/// The JSON kind shared by the items of lists, as Go's `reflect.Kind` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Scalar(u8),
}

fn kind_of(v: &Value) -> Result<Kind> {
    Ok(match v {
        Value::Object(_) => Kind::Map,
        Value::Array(_) => {
            return Err(SmpError::Unprocessable(
                "lists of lists are not supported".into(),
            ));
        }
        Value::Null => Kind::Scalar(0),
        Value::Bool(_) => Kind::Scalar(1),
        Value::Number(_) => Kind::Scalar(2),
        Value::String(_) => Kind::Scalar(3),
    })
}

fn element_kind(lists: &[&[Value]]) -> Result<Kind> {
    let mut kind = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let k = kind_of(v)?;
        match kind {
            None => kind = Some(k),
            Some(prev) if prev != k => {
                let all: Vec<Value> = lists.iter().map(|l| Value::Array(l.to_vec())).collect();
                return Err(SmpError::Other(format!(
                    "list element types are not identical: {}",
                    gofmt::value(&Value::Array(all))
                )));
            }
            Some(_) => {}
        }
    }
    kind.ok_or_else(|| SmpError::Other("no elements in any of the given slices".into()))
}

/// Merges a list field whose strategy is `merge` (or a `$deleteFromPrimitiveList`).
fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    meta: &FieldMeta,
    delete_list: bool,
) -> Result<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = element_kind(&[&original, &patch])?;
    let merge_key = meta.merge_key.unwrap_or("");
    let (server_order, merged, patch) = if kind != Kind::Map {
        if delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut both = original.clone();
        both.extend(patch.iter().cloned());
        (original, deduplicate(both), patch)
    } else {
        if merge_key.is_empty() {
            return Err(SmpError::Other(format!(
                "cannot merge lists without merge key for {}",
                meta.item_ty().name()
            )));
        }
        let (original, patch) = special_elements(original, patch, merge_key)?;
        let merged = merge_by_key(original.clone(), &patch, merge_key, meta.item_ty())?;
        (original, merged, patch)
    };
    let (patch_items, server_only) = partition(merged, &patch, merge_key)?;
    normalize_order(
        patch_items,
        server_only,
        &patch,
        &server_order,
        merge_key,
        kind,
    )
}

/// Go's `deduplicateScalars`: a later duplicate is overwritten by the last item.
fn deduplicate(mut s: Vec<Value>) -> Vec<Value> {
    let mut length = s.len() as isize - 1;
    let mut i: isize = 0;
    while i < length {
        let mut j = i + 1;
        while j <= length {
            if s[i as usize] == s[j as usize] {
                s[j as usize] = s[length as usize].clone();
                s.truncate(length as usize);
                length -= 1;
                j -= 1;
            }
            j += 1;
        }
        i += 1;
    }
    s
}

/// Applies `$patch: delete` and `$patch: replace` items; returns the original and the patch
/// without them.
fn special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut plain = Vec::new();
    let mut replace = false;
    for v in patch {
        let Value::Object(m) = &v else {
            return Err(bad_arg("map[string]interface {}", &v));
        };
        let Some(directive) = m.get(DIRECTIVE) else {
            plain.push(v);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let value = m.get(merge_key).ok_or_else(|| no_merge_key(m, merge_key))?;
                for item in &original {
                    if !item.is_object() {
                        return Err(SmpError::Other(format!(
                            "value for key {merge_key} is not a map"
                        )));
                    }
                }
                original.retain(|item| item.get(merge_key) != Some(value));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(SmpError::Other(
                    "merging lists cannot yet be specified in the patch".into(),
                ));
            }
            _ => return Err(bad_patch_type(directive, m)),
        }
    }
    if replace {
        Ok((plain, Vec::new()))
    } else {
        Ok((original, plain))
    }
}

/// Position of the object whose `merge_key` equals `value`.
fn find_by_key(list: &[Value], merge_key: &str, value: &Value) -> Result<Option<usize>> {
    for (i, item) in list.iter().enumerate() {
        let Value::Object(m) = item else {
            return Err(SmpError::Other(format!("value for key {i} is not a map")));
        };
        if m.get(merge_key) == Some(value) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Merges each patch item into the original item with the same key, or appends it.
fn merge_by_key(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    item_ty: Ty,
) -> Result<Vec<Value>> {
    for v in patch {
        let Value::Object(m) = v else {
            return Err(bad_arg("map[string]interface {}", v));
        };
        let value = m.get(merge_key).ok_or_else(|| no_merge_key(m, merge_key))?;
        match find_by_key(&original, merge_key, value)? {
            Some(i) => {
                let Value::Object(o) = std::mem::take(&mut original[i]) else {
                    continue;
                };
                original[i] = Value::Object(merge_map(o, m.clone(), item_ty)?);
            }
            None => original.push(v.clone()),
        }
    }
    Ok(original)
}

/// Splits `merged` into the items present in `by` and the others (server-only).
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut in_patch = Vec::new();
    let mut server_only = Vec::new();
    for v in merged {
        let found = if merge_key.is_empty() {
            by.contains(&v)
        } else {
            let Value::Object(m) = &v else {
                return Err(bad_arg("map[string]interface {}", &v));
            };
            let value = m.get(merge_key).ok_or_else(|| no_merge_key(m, merge_key))?;
            find_by_key(by, merge_key, value)?.is_some()
        };
        if found {
            in_patch.push(v);
        } else {
            server_only.push(v);
        }
    }
    Ok((in_patch, server_only))
}

/// The value lists are ordered by: the merge key of objects, the item itself otherwise.
fn order_value<'a>(v: &'a Value, merge_key: &str, kind: Kind) -> Option<&'a Value> {
    match kind {
        Kind::Map => v.as_object().and_then(|m| m.get(merge_key)),
        Kind::Scalar(_) => Some(v),
    }
}

fn index_of(list: &[Value], v: &Value, merge_key: &str, kind: Kind) -> Option<usize> {
    let wanted = order_value(v, merge_key, kind);
    list.iter()
        .position(|item| order_value(item, merge_key, kind) == wanted)
}

/// Upstream's `normalizeElementOrder`: patch items in `patch_order`, server-only items in
/// `server_order`, then interleaved by the live list's order.
fn normalize_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: Kind,
) -> Result<Vec<Value>> {
    let patch_items = sort_by_order(patch_items, patch_order, merge_key, kind)?;
    let server_only = sort_by_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted(
        server_only,
        patch_items,
        server_order,
        merge_key,
        kind,
    ))
}

fn sort_by_order(
    items: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: Kind,
) -> Result<Vec<Value>> {
    let (mut keep, deleted) = if kind == Kind::Map {
        for v in items.iter().chain(order) {
            let Value::Object(m) = v else {
                return Err(bad_arg("map[string]interface {}", v));
            };
            if !m.contains_key(merge_key) {
                return Err(no_merge_key(m, merge_key));
            }
        }
        items
            .into_iter()
            .partition(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
    } else {
        (items, Vec::new())
    };
    keep.sort_by_key(|v| index_of(order, v, merge_key, kind).unwrap_or(usize::MAX));
    keep.extend(deleted);
    Ok(keep)
}

/// Upstream's `mergeSortedSlice`: inserts each `left` item before the first `right` item
/// that comes after it in `server_order`, keeping both lists' own order.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: Kind,
) -> Vec<Value> {
    let less = |l: &Value, r: &Value| match (
        index_of(server_order, l, merge_key, kind),
        index_of(server_order, r, merge_key, kind),
    ) {
        (Some(li), Some(ri)) => li < ri,
        _ => false,
    };
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => less(l, r),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}
