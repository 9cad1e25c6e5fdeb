//! `PATCH` with `application/apply-patch+yaml`: server-side apply through the usual write
//! path. A missing object is created from the configuration; otherwise the configuration
//! is merged onto the stored object (`crate::apply`), then defaulted, validated and stored
//! under optimistic concurrency like any patch.

use http::HeaderMap;
use serde_json::{Map, Value, json};

use super::{
    PATCH_RETRIES, Query, Scope, create, field_validation, load, object, object_response,
    store_update, with_warnings,
};
use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::registry::catalog::ResourceInfo;

/// Serves a server-side apply of `body` to `name`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn apply(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    body: &[u8],
    q: &Query,
    scope: Scope,
) -> Result<axum::response::Response> {
    let mut config = crate::apply::decode_config(r, body, name)?;
    let manager = match q.get("fieldManager") {
        Some(m) if !m.is_empty() => m.clone(),
        _ => {
            return Err(ApiError::BadRequest(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
            ));
        }
    };
    let force = q.get("force").is_some_and(|f| f == "true");
    if let Some(Value::Object(m)) = config.get_mut("metadata") {
        m.insert("name".into(), json!(name));
    } else {
        config.insert("metadata".into(), json!({ "name": name }));
    }
    for _ in 0..PATCH_RETRIES {
        let (old, current) = match load(ctx, r, namespace, name).await {
            Ok(found) => found,
            Err(ApiError::NotFound { .. }) if scope == Scope::Main => {
                let obj = crate::apply::apply(r, &Map::new(), &config, &manager, force, name)?;
                let mut json_headers = HeaderMap::new();
                json_headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                let body = object::encode(&obj)?;
                match create(ctx, r, namespace, &json_headers, &body, q).await {
                    Err(ApiError::AlreadyExists { .. }) => continue,
                    other => return other,
                }
            }
            Err(e) => return Err(e),
        };
        let merged = crate::apply::apply(r, &old, &config, &manager, force, name)?;
        let (mut new, warnings) = field_validation(r, merged, q)?;
        crate::defaults::apply(r, &mut new);
        crate::quantity::canonicalize(r, &mut new)?;
        if let Some(m) = object::meta(&mut new) {
            m.remove("resourceVersion");
        }
        match store_update(ctx, r, namespace, name, new, &old, current, scope, q).await {
            Err(ApiError::Conflict { .. }) => continue,
            Ok(stored) => {
                return Ok(with_warnings(
                    object_response(http::StatusCode::OK, stored),
                    &warnings,
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::Conflict {
        resource: object::group_resource(r),
        name: name.into(),
        detail: super::MODIFIED.into(),
    })
}
