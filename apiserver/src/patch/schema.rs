//! Strategic-merge-patch metadata of the built-in types: `proto/patch_fields.txt` (generated
//! by `proto/patch_fields.py` from upstream's Go struct tags), parsed once.
//!
//! A [`Ty`] says where a JSON value sits in the Go type graph; [`Ty::field`] gives the
//! metadata of one of its fields ([`FieldMeta`]: the field's value type, list strategy and
//! merge key), so the engine can walk an object from its kind's root type. The same file
//! records the `+listType`/`+listMapKey`/`+mapType`/`+structType` markers ([`FieldMeta`]'s
//! `list_type`, `list_keys`, `map_type`; [`struct_type`]), which server-side apply and the
//! OpenAPI `x-kubernetes-*` extensions use.

use std::collections::HashMap;
use std::sync::LazyLock;

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

    /// Whether the value is a Go map (or a field without metadata holding an object).
    pub fn shape_is_map(&self) -> bool {
        matches!(self.shape, Shape::Map)
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
            Ty::Struct(t) => SCHEMA
                .fields
                .get(t)
                .and_then(|f| f.get(name))
                .copied()
                .unwrap_or(FieldMeta::NONE),
            Ty::MapOf(Some(elem)) => FieldMeta {
                shape: Shape::Struct,
                elem: Some(elem),
                ..FieldMeta::NONE
            },
            Ty::MapOf(None) | Ty::Untyped => FieldMeta::NONE,
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
