//! Strategic-merge-patch metadata of the built-in types: `proto/patch_fields.txt` (generated
//! by `proto/patch_fields.py` from upstream's Go struct tags), parsed once.
//!
//! A [`Ty`] says where a JSON value sits in the Go type graph; [`Ty::field`] gives the
//! metadata of one of its fields ([`FieldMeta`]: the field's value type, list strategy and
//! merge key), so the engine can walk an object from its kind's root type. The same file
//! records the `+listType`/`+listMapKey`/`+mapType`/`+structType` markers ([`FieldMeta`]'s
//! `list_type`, `list_keys`, `map_type`; [`struct_type`]), which server-side apply and the
//! OpenAPI `x-kubernetes-*` extensions use.
//!
//! Custom resources have no Go types: [`register_custom`] adds synthetic types (named
//! `custom:<hash>`, interned by content) built from each served CRD version's structural
//! schema, as apiextensions-apiserver builds the structured-merge-diff type of a CRD, and
//! [`custom_root`] gives the root of a custom kind. [`root`] stays `None` for custom kinds
//! (strategic merge patch is refused for them).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{LazyLock, PoisonError, RwLock};

use crate::crd::schema::{AdditionalProperties, Structural};

const DATA: &str = include_str!("../../proto/patch_fields.txt");

/// The JSON shape of a field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// An object of the field's element struct type.
    Struct,
    /// An array of element structs or primitives.
    List,
    /// An object with arbitrary keys whose values are element structs or primitives.
    Map,
    /// Anything else (scalars, opaque types, fields without metadata).
    Prim,
}

/// The `patchStrategy` of a field, without `retainKeys` (which only the patch's
/// `$retainKeys` directive acts on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// No tag: lists are replaced, maps merged.
    Default,
    /// `merge`: lists are merged (by the merge key for lists of objects).
    Merge,
    /// `replace`: the patch value replaces the whole value.
    Replace,
}

/// What the Go struct tags say about one JSON field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldMeta {
    /// The shape of the value.
    pub shape: Shape,
    /// The struct type of the value, list items or map values (`core/v1.Container`).
    pub elem: Option<&'static str>,
    /// The list/map strategy.
    pub strategy: Strategy,
    /// `patchMergeKey`, for lists of objects merged by key.
    pub merge_key: Option<&'static str>,
    /// The `patchStrategy` tag as written (`merge,retainKeys`).
    pub strategy_tag: Option<&'static str>,
    /// `+listType=atomic|set|map`.
    pub list_type: Option<&'static str>,
    /// `+listMapKey` markers, joined by commas (`containerPort,protocol`).
    pub list_keys: Option<&'static str>,
    /// The field's `+mapType` or `+structType` marker (`atomic`, `granular`).
    pub map_type: Option<&'static str>,
}

impl FieldMeta {
    /// A field without metadata.
    pub const NONE: FieldMeta = FieldMeta {
        shape: Shape::Prim,
        elem: None,
        strategy: Strategy::Default,
        merge_key: None,
        strategy_tag: None,
        list_type: None,
        list_keys: None,
        map_type: None,
    };

    /// The type of the field's value when it is an object.
    pub fn value_ty(&self) -> Ty {
        match (self.shape, self.elem) {
            (Shape::Map, elem) => Ty::MapOf(elem),
            (_, Some(elem)) => Ty::Struct(elem),
            _ => Ty::Untyped,
        }
    }

    /// Whether the value is a Go map (or a field without metadata holding an object), or a
    /// custom schema object that has only `additionalProperties`.
    pub fn shape_is_map(&self) -> bool {
        match (self.shape, self.elem) {
            (Shape::Map, _) => true,
            (Shape::Struct, Some(t)) if t.starts_with(CUSTOM_PREFIX) => {
                custom_type(t, |c| c.fields.is_empty())
            }
            _ => false,
        }
    }

    /// The type of the field's list items.
    pub fn item_ty(&self) -> Ty {
        self.elem.map_or(Ty::Untyped, Ty::Struct)
    }
}

/// Where a JSON object sits in the type graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// An object of a Go struct type, e.g. `apps/v1.DeploymentSpec`.
    Struct(&'static str),
    /// A Go map whose values are of the given struct type (or primitives).
    MapOf(Option<&'static str>),
    /// No metadata: maps merge, lists are replaced.
    Untyped,
}

impl Ty {
    /// The metadata of field `name` of an object of this type.
    pub fn field(self, name: &str) -> FieldMeta {
        match self {
            Ty::Struct(t) => match SCHEMA.fields.get(t) {
                Some(f) => f.get(name).copied().unwrap_or(FieldMeta::NONE),
                None if t.starts_with(CUSTOM_PREFIX) => {
                    custom_type(t, |c| c.fields.get(name).or(c.rest.as_ref()).copied())
                        .unwrap_or(FieldMeta::NONE)
                }
                None => FieldMeta::NONE,
            },
            Ty::MapOf(Some(elem)) => FieldMeta {
                shape: Shape::Struct,
                elem: Some(elem),
                ..FieldMeta::NONE
            },
            Ty::MapOf(None) | Ty::Untyped => FieldMeta::NONE,
        }
    }

    /// Whether field `name` is a declared field of this type (a struct field or a custom
    /// schema property), not an entry of a map.
    pub fn declares(self, name: &str) -> bool {
        match self {
            Ty::Struct(t) if t.starts_with(CUSTOM_PREFIX) && !SCHEMA.fields.contains_key(t) => {
                custom_type(t, |c| c.fields.contains_key(name))
            }
            Ty::Struct(_) => true,
            Ty::MapOf(_) | Ty::Untyped => false,
        }
    }

    /// The Go type name, for error messages.
    pub fn name(self) -> &'static str {
        match self {
            Ty::Struct(t) => t,
            Ty::MapOf(_) => "map",
            Ty::Untyped => "",
        }
    }
}

/// The root type of objects of `kind` in `group`/`version`, if it is a built-in Go type.
pub fn root(group: &str, version: &str, kind: &str) -> Option<Ty> {
    let package = SCHEMA.groups.get(&(group.to_owned(), version.to_owned()))?;
    let name = format!("{package}.{kind}");
    SCHEMA
        .fields
        .get_key_value(name.as_str())
        .map(|(k, _)| Ty::Struct(k))
}

/// The type-level `+structType` marker of a Go struct (`atomic`, `granular`).
pub fn struct_type(ty: &str) -> Option<&'static str> {
    SCHEMA.struct_types.get(ty).copied()
}

/// The recorded fields of Go struct `ty` (`core/v1.Container`), by JSON name.
pub fn fields_of(ty: &str) -> impl Iterator<Item = (&'static str, FieldMeta)> {
    SCHEMA
        .fields
        .get(ty)
        .into_iter()
        .flat_map(|f| f.iter().map(|(k, v)| (*k, *v)))
}

/// The prefix of the synthetic type names of custom schema objects.
const CUSTOM_PREFIX: &str = "custom:";

/// The Go type of every object's `metadata`.
const OBJECT_META: &str = "meta/v1.ObjectMeta";

/// A synthetic type: one object node of a CRD's structural schema.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct CustomType {
    /// `properties`, by name.
    fields: HashMap<&'static str, FieldMeta>,
    /// The `additionalProperties` schema (or the unknown fields kept by
    /// `x-kubernetes-preserve-unknown-fields`: untyped), for keys not in `fields`.
    rest: Option<FieldMeta>,
}

/// Synthetic types by name, and the root type of each served custom kind.
#[derive(Default)]
struct Custom {
    /// Synthetic types, kept for the life of the process (bounded by the distinct shapes of
    /// CRD schemas ever served).
    types: HashMap<&'static str, CustomType>,
    /// (group, version, kind) → root type, replaced by each [`register_custom`].
    roots: HashMap<(String, String, String), &'static str>,
}

static CUSTOM: LazyLock<RwLock<Custom>> = LazyLock::new(|| RwLock::new(Custom::default()));

fn custom_type<T: Default>(name: &str, f: impl FnOnce(&CustomType) -> T) -> T {
    let custom = CUSTOM.read().unwrap_or_else(PoisonError::into_inner);
    custom.types.get(name).map(f).unwrap_or_default()
}

/// The root type of custom kind `kind` in `group`/`version` (registered by
/// [`register_custom`] from its structural schema).
pub fn custom_root(group: &str, version: &str, kind: &str) -> Option<Ty> {
    let custom = CUSTOM.read().unwrap_or_else(PoisonError::into_inner);
    custom
        .roots
        .get(&(group.to_owned(), version.to_owned(), kind.to_owned()))
        .map(|t| Ty::Struct(t))
}

/// Makes the served custom kinds `(group, version, kind, structural schema)` what
/// [`custom_root`] answers: their schemas become synthetic types as apiextensions-apiserver
/// builds a CRD's type for server-side apply — `x-kubernetes-list-type` (lists without it are
/// atomic) with `x-kubernetes-list-map-keys`, `x-kubernetes-map-type` (objects are granular
/// by default), `additionalProperties` as the values of a map, and the unknown fields of
/// `x-kubernetes-preserve-unknown-fields` untyped (deduced: objects granular, lists atomic).
/// `metadata` is always the built-in `ObjectMeta`.
pub fn register_custom<'a>(
    kinds: impl IntoIterator<Item = (&'a str, &'a str, &'a str, &'a Structural)>,
) {
    let mut custom = CUSTOM.write().unwrap_or_else(PoisonError::into_inner);
    let mut roots = HashMap::new();
    for (group, version, kind, schema) in kinds {
        let name = custom_root_type(&mut custom, schema);
        roots.insert(
            (group.to_owned(), version.to_owned(), kind.to_owned()),
            name,
        );
    }
    custom.roots = roots;
}

/// The root type of objects with structural schema `schema`, as [`register_custom`] makes
/// it, without making it the root of any kind.
pub fn custom_type_of(schema: &Structural) -> Ty {
    let mut custom = CUSTOM.write().unwrap_or_else(PoisonError::into_inner);
    Ty::Struct(custom_root_type(&mut custom, schema))
}

fn custom_root_type(custom: &mut Custom, schema: &Structural) -> &'static str {
    let mut root = custom_object(custom, schema);
    root.fields.insert(
        "metadata",
        FieldMeta {
            shape: Shape::Struct,
            elem: Some(OBJECT_META),
            ..FieldMeta::NONE
        },
    );
    intern_type(custom, root)
}

/// The synthetic type of object schema `s`.
fn custom_object(custom: &mut Custom, s: &Structural) -> CustomType {
    let fields = s
        .properties
        .iter()
        .map(|(k, v)| (crate::registry::custom::intern(k), custom_meta(custom, v)))
        .collect();
    let rest = match &s.additional_properties {
        Some(AdditionalProperties::Schema(v)) => Some(custom_meta(custom, v)),
        _ => None,
    };
    CustomType { fields, rest }
}

/// The metadata of a field whose value has schema `s`.
fn custom_meta(custom: &mut Custom, s: &Structural) -> FieldMeta {
    let intern = crate::registry::custom::intern;
    let map_type = s.x_map_type.as_deref().map(intern);
    let is_object = s.type_ == "object"
        || !s.properties.is_empty()
        || matches!(
            s.additional_properties,
            Some(AdditionalProperties::Schema(_))
        );
    if s.type_ == "array" {
        let elem = match s.items.as_deref() {
            Some(items) => custom_meta(custom, items).elem,
            None => None,
        };
        let list_keys =
            (!s.x_list_map_keys.is_empty()).then(|| intern(&s.x_list_map_keys.join(",")));
        FieldMeta {
            shape: Shape::List,
            elem,
            list_type: s.x_list_type.as_deref().map(intern),
            list_keys,
            map_type,
            ..FieldMeta::NONE
        }
    } else if is_object && s.type_ != "array" {
        let ty = custom_object(custom, s);
        if ty.fields.is_empty() && ty.rest.is_none() {
            // No schema below (preserved unknown fields): untyped, granular unless atomic.
            return FieldMeta {
                map_type,
                ..FieldMeta::NONE
            };
        }
        FieldMeta {
            shape: Shape::Struct,
            elem: Some(intern_type(custom, ty)),
            map_type,
            ..FieldMeta::NONE
        }
    } else {
        FieldMeta {
            map_type,
            ..FieldMeta::NONE
        }
    }
}

/// The name of synthetic type `ty`, registering it if new.
fn intern_type(custom: &mut Custom, ty: CustomType) -> &'static str {
    let mut fields: Vec<_> = ty.fields.iter().collect();
    fields.sort_by_key(|(k, _)| **k);
    let mut h = DefaultHasher::new();
    format!("{fields:?}{:?}", ty.rest).hash(&mut h);
    let hash = h.finish();
    let mut n = 0u32;
    loop {
        let name = format!("{CUSTOM_PREFIX}{hash:016x}.{n}");
        match custom.types.get_key_value(name.as_str()) {
            Some((k, existing)) if *existing == ty => return k,
            Some(_) => n += 1,
            None => {
                let name = crate::registry::custom::intern(&name);
                custom.types.insert(name, ty);
                return name;
            }
        }
    }
}

struct Schema {
    /// (group, version) → package (`apps/v1`).
    groups: HashMap<(String, String), &'static str>,
    /// Go type → JSON field → metadata.
    fields: HashMap<&'static str, HashMap<&'static str, FieldMeta>>,
    /// Go type → type-level `+structType`.
    struct_types: HashMap<&'static str, &'static str>,
}

static SCHEMA: LazyLock<Schema> = LazyLock::new(|| parse(DATA));

fn dash(s: &'static str) -> Option<&'static str> {
    (s != "-").then_some(s)
}

fn parse(data: &'static str) -> Schema {
    let mut schema = Schema {
        groups: HashMap::new(),
        fields: HashMap::new(),
        struct_types: HashMap::new(),
    };
    for line in data.lines() {
        let words: Vec<&'static str> = line.split(' ').collect();
        match words.as_slice() {
            ["group", group, version, package] => {
                let group = if *group == "-" { "" } else { group };
                schema
                    .groups
                    .insert((group.to_owned(), (*version).to_owned()), package);
            }
            ["type", ty, struct_type] => {
                schema.struct_types.insert(ty, struct_type);
            }
            [
                "field",
                ty,
                name,
                shape,
                elem,
                strategy,
                key,
                list_type,
                list_keys,
                map_type,
            ] => {
                let shape = match *shape {
                    "struct" => Shape::Struct,
                    "list" => Shape::List,
                    "map" => Shape::Map,
                    _ => Shape::Prim,
                };
                let strategy_tag = dash(strategy);
                let strategy = if strategy.split(',').any(|s| s == "merge") {
                    Strategy::Merge
                } else if strategy.split(',').any(|s| s == "replace") {
                    Strategy::Replace
                } else {
                    Strategy::Default
                };
                let meta = FieldMeta {
                    shape,
                    elem: dash(elem),
                    strategy,
                    merge_key: dash(key),
                    strategy_tag,
                    list_type: dash(list_type),
                    list_keys: dash(list_keys),
                    map_type: dash(map_type),
                };
                schema.fields.entry(ty).or_default().insert(name, meta);
            }
            _ => {}
        }
    }
    schema
}
