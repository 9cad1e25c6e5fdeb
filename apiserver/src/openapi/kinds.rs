//! Which k8s-openapi type models each kind the catalog can serve.
//!
//! The list mirrors the catalog's unit tests (`registry/catalog.rs`), which tie every catalog
//! entry to its k8s-openapi `v1_33` type; `every_served_kind_has_a_type` (in `tests.rs`) checks
//! that every served resource is found here.

use k8s_openapi::Resource;
use k8s_openapi::schemars::{JsonSchema, Schema, SchemaGenerator};

/// One kind and how to put its schema (and everything it references) into a generator.
#[derive(Clone, Copy)]
pub(crate) struct KindType {
    /// API group (`""` for core).
    pub(crate) group: &'static str,
    /// API version.
    pub(crate) version: &'static str,
    /// Kind.
    pub(crate) kind: &'static str,
    /// The schema's name, e.g. `io.k8s.api.apps.v1.Deployment`.
    pub(crate) schema_name: fn() -> std::borrow::Cow<'static, str>,
    /// Registers the schema (and its dependencies) in the generator.
    pub(crate) add: fn(&mut SchemaGenerator) -> Schema,
}

/// `KindType`s for the listed k8s-openapi types.
macro_rules! kinds {
    ($($ty:ty),* $(,)?) => {
        vec![$(KindType {
            group: <$ty as Resource>::GROUP,
            version: <$ty as Resource>::VERSION,
            kind: <$ty as Resource>::KIND,
            schema_name: <$ty as JsonSchema>::schema_name,
            add: SchemaGenerator::subschema_for::<$ty>,
        }),*]
    };
}

/// Every kind of the catalog (served or not), with its k8s-openapi type.
pub(crate) fn all() -> Vec<KindType> {
    crate::registry::types::with_builtin_types!(kinds)
}
