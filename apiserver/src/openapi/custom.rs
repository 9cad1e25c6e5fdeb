//! The documents of custom resources, built when the served custom set changes and merged
//! with the built-in ones (which stay as they were built at start-up).
//!
//! As upstream's CRD OpenAPI controllers publish them: one v3 document per custom group
//! version (`apis/<group>/<version>`, every CRD serving that version merged into it: their
//! kinds' schemas (`custom_schema`), `<Kind>List`s, paths, and the apimachinery schemas they
//! reference), listed in the v3 index with its hash; and the v2 document with each CRD's
//! Swagger 2.0 definitions and paths added to the built-in ones (built on first request).
//!
//! The cache is keyed by the served custom versions themselves: the same set (the same
//! descriptors and `spec.versions` entries) reuses the documents, so a CRD controller pass that
//! changes nothing rebuilds nothing, and any change to a served version (its schema's
//! descriptions included) gives new documents with new hashes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::custom_schema::{self, Dialect, KindInput};
use super::schemas::{MetaNames, closure, refs_in};
use super::{Document, OpenApi, gv_key, hash_url, http_date, paths, v2, v2_proto};
use crate::registry::custom::Served;

/// The documents for one custom set, next to the built-in ones.
pub(super) struct CustomDocs {
    /// The v3 index: built-in and custom group versions.
    pub(super) index: bytes::Bytes,
    /// Custom v3 documents by index key.
    pub(super) v3: BTreeMap<String, Document>,
    /// When these documents were built (the v2 document's `Last-Modified`).
    pub(super) last_modified: String,
    /// The v2 document with the custom resources merged in, built on first request.
    v2: OnceLock<Document>,
    /// Its protobuf encoding, built on first request.
    v2_proto: OnceLock<Document>,
    /// The custom versions' v2 material: a v3-shaped document (paths, and the v2 form of the
    /// kinds' schemas) that `v2::convert` turns into Swagger.
    v2_source: Value,
}

/// The cache: the custom set the documents were built for, and the documents.
pub(super) type Cache = Mutex<Option<(Vec<Served>, Arc<CustomDocs>)>>;

/// Whether two sorted custom sets publish the same documents.
fn same_set(a: &[Served], b: &[Served]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            Arc::ptr_eq(x, y)
                || (std::ptr::eq(x.info, y.info)
                    && x.version == y.version
                    && x.schema == y.schema
                    && x.selectable_fields == y.selectable_fields)
        })
}

impl OpenApi {
    /// The documents for `served` (not empty), from the cache or built now.
    pub(super) fn custom_docs(&self, served: &[Served]) -> Arc<CustomDocs> {
        let mut sorted = served.to_vec();
        sorted.sort_by(|a, b| {
            (a.info.group, a.info.version, a.info.plural).cmp(&(
                b.info.group,
                b.info.version,
                b.info.plural,
            ))
        });
        let mut cache = self.custom.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((sources, docs)) = cache.as_mut()
            && same_set(sources, &sorted)
        {
            // Newer handles of the same content: compare pointers next time.
            *sources = sorted;
            return Arc::clone(docs);
        }
        let docs = Arc::new(self.build_custom(&sorted));
        *cache = Some((sorted, Arc::clone(&docs)));
        docs
    }

    fn build_custom(&self, served: &[Served]) -> CustomDocs {
        let started = Instant::now();
        let v3_values = documents(&self.meta_defs, &self.meta, served, Dialect::V3);
        let v3: BTreeMap<String, Document> = v3_values
            .iter()
            .filter(|(k, _)| !self.v3.contains_key(*k))
            .map(|(k, v)| (k.clone(), Document::new(v)))
            .collect();
        let mut index_paths = Map::new();
        for (k, d) in self.v3.iter().chain(&v3) {
            index_paths.insert(
                k.clone(),
                json!({ "serverRelativeURL": hash_url(k, &d.hash) }),
            );
        }
        let index = serde_json::to_vec(&json!({ "paths": index_paths }))
            .unwrap_or_default()
            .into();
        // The v2 material: every custom version's paths and v2 schemas in one document.
        let v2_docs = documents(&self.meta_defs, &self.meta, served, Dialect::V2);
        let mut v2_paths = Map::new();
        let mut v2_schemas = Map::new();
        for doc in v2_docs.values() {
            if let Some(p) = doc["paths"].as_object() {
                v2_paths.extend(p.clone());
            }
            if let Some(s) = doc["components"]["schemas"].as_object() {
                v2_schemas.extend(s.clone());
            }
        }
        let v2_source = json!({ "paths": v2_paths, "components": { "schemas": v2_schemas } });
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            custom_versions = served.len(),
            documents = v3.len(),
            "built the OpenAPI documents of custom resources"
        );
        CustomDocs {
            index,
            v3,
            last_modified: http_date(),
            v2: OnceLock::new(),
            v2_proto: OnceLock::new(),
            v2_source,
        }
    }
}

impl CustomDocs {
    /// The v2 document: the built-in one with the custom definitions and paths added.
    pub(super) fn v2(&self, api: &OpenApi) -> &Document {
        self.v2.get_or_init(|| {
            let started = Instant::now();
            let mut merged: Value = serde_json::from_slice(&api.v2.body).unwrap_or(Value::Null);
            let custom = v2::convert(std::iter::once(&self.v2_source));
            for section in ["definitions", "paths"] {
                let (Some(into), Some(from)) = (
                    merged.get_mut(section).and_then(Value::as_object_mut),
                    custom.get(section).and_then(Value::as_object),
                ) else {
                    continue;
                };
                for (k, v) in from {
                    if !into.contains_key(k) {
                        into.insert(k.clone(), v.clone());
                    }
                }
            }
            let doc = Document::new(&merged);
            tracing::info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                bytes = doc.body.len(),
                "merged custom resources into the OpenAPI v2 document"
            );
            doc
        })
    }

    /// The protobuf encoding of [`CustomDocs::v2`].
    pub(super) fn v2_protobuf(&self, api: &OpenApi) -> &Document {
        self.v2_proto.get_or_init(|| {
            let value: Value = serde_json::from_slice(&self.v2(api).body).unwrap_or(Value::Null);
            Document::from_bytes(v2_proto::encode(&value))
        })
    }
}

/// One document per custom group version: paths, the kinds' and lists' schemas in `dialect`,
/// and the apimachinery schemas (from `meta_defs`) they reference.
pub(super) fn documents(
    meta_defs: &Map<String, Value>,
    meta: &MetaNames,
    served: &[Served],
    dialect: Dialect,
) -> BTreeMap<String, Value> {
    // Per group version: paths and schemas.
    type Parts = (Map<String, Value>, Map<String, Value>);
    let mut by_gv: BTreeMap<String, Parts> = BTreeMap::new();
    for c in served {
        let r = c.info;
        let (paths, schemas) = by_gv.entry(gv_key(r.group, r.version)).or_default();
        let name = custom_schema::definition_name(r.group, r.version, r.kind);
        let kind = custom_schema::kind_schema(
            &KindInput {
                group: r.group,
                version: r.version,
                kind: r.kind,
                schema: c.schema.as_ref(),
                selectable_fields: &c.selectable_fields,
                object_meta: &meta.object_meta,
            },
            dialect,
        );
        let list = custom_schema::list_schema(
            r.group,
            r.version,
            r.kind,
            r.plural,
            &meta.list_meta,
            dialect,
        );
        paths::add_custom_resource(paths, r, &name, meta);
        schemas.insert(format!("{name}List"), list);
        schemas.insert(name, kind);
    }
    by_gv
        .into_iter()
        .map(|(key, (paths, mut schemas))| {
            let mut roots = Vec::new();
            refs_in(&Value::Object(paths.clone()), &mut roots);
            for s in schemas.values() {
                refs_in(s, &mut roots);
            }
            roots.retain(|r| !schemas.contains_key(r));
            for (name, schema) in closure(meta_defs, roots) {
                schemas.entry(name).or_insert(schema);
            }
            let sorted: BTreeMap<String, Value> = schemas.into_iter().collect();
            let doc = json!({
                "openapi": "3.0.0",
                "info": { "title": "Kubernetes CRD Swagger", "version": "v0.1.0" },
                "paths": paths,
                "components": { "schemas": sorted },
            });
            (key, doc)
        })
        .collect()
}
