use std::sync::OnceLock;

use axum::response::Response;
use http::StatusCode;
use serde_json::Value;

use super::*;

fn api() -> &'static OpenApi {
    static API: OnceLock<OpenApi> = OnceLock::new();
    API.get_or_init(|| OpenApi::build(&Registry::builtin()))
}

async fn body(resp: Response) -> Vec<u8> {
    axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec()
}

async fn get_json(path: &str, query: Option<&str>) -> Value {
    let resp = api().serve_with(&[], path, query, Some("application/json"));
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    serde_json::from_slice(&body(resp).await).unwrap()
}

fn header(resp: &Response, name: http::header::HeaderName) -> Option<&str> {
    resp.headers().get(name).map(|v| v.to_str().unwrap())
}

/// `(key, hash)` from the index entry `key`.
async fn index_hash(key: &str) -> String {
    let index = get_json("/openapi/v3", None).await;
    let url = index["paths"][key]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("{key} not in the index"))
        .to_owned();
    let prefix = format!("/openapi/v3/{key}?hash=");
    url.strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned()
}

fn gv_documents() -> Vec<(&'static String, Value)> {
    api()
        .v3
        .iter()
        .map(|(k, d)| (k, serde_json::from_slice(&d.body).unwrap()))
        .collect()
}

#[tokio::test]
async fn index_links_every_served_group_version_with_its_hash() {
    let index = get_json("/openapi/v3", Some("timeout=32s")).await;
    let paths = index["paths"].as_object().unwrap();
    assert!(paths.contains_key("api/v1"));
    assert!(paths.contains_key("apis/apps/v1"));
    let registry = Registry::builtin();
    let mut expected = 0;
    for (group, versions) in registry.groups() {
        for version in versions {
            assert!(
                paths.contains_key(&gv_key(group, version)),
                "{group}/{version}"
            );
            expected += 1;
        }
    }
    assert_eq!(paths.len(), expected);
    for (key, entry) in paths {
        let hash = &api().v3[key].hash;
        assert_eq!(hash.len(), 128);
        assert!(
            hash.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())
        );
        assert_eq!(
            entry["serverRelativeURL"],
            format!("/openapi/v3/{key}?hash={hash}")
        );
    }
}

#[tokio::test]
async fn apps_v1_has_the_deployment_schema_and_passes_kubectls_field_validation_gate() {
    let doc = get_json("/openapi/v3/apis/apps/v1", None).await;
    assert_eq!(doc["openapi"], "3.0.0");
    let deployment = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"],
        serde_json::json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    assert!(
        deployment["description"]
            .as_str()
            .unwrap()
            .starts_with("Deployment enables declarative updates")
    );
    // Upstream does not require `metadata`; `spec` is a reference wrapped in `allOf`.
    assert!(deployment.get("required").is_none(), "{deployment}");
    assert_eq!(
        deployment["properties"]["spec"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"
    );
    assert!(deployment["properties"]["spec"]["description"].is_string());
    let list = &doc["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentList"];
    assert_eq!(
        list["x-kubernetes-group-version-kind"][0]["kind"],
        "DeploymentList"
    );
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.Deployment"
    );

    // kubectl's gate (query_param_verifier_v3.go): the first `patch` operation whose
    // single-object GVK matches must list `fieldValidation`. Maps are unordered there, so every
    // such operation must.
    let gvk = serde_json::json!({"group": "apps", "kind": "Deployment", "version": "v1"});
    let mut patch_ops = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let Some(patch) = item.get("patch") else {
            continue;
        };
        if patch["x-kubernetes-group-version-kind"] != gvk {
            continue;
        }
        patch_ops += 1;
        assert_eq!(patch["x-kubernetes-action"], "patch");
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for want in ["dryRun", "fieldManager", "fieldValidation", "force"] {
            assert!(names.contains(&want), "{path}: {names:?}");
        }
        let content = patch["requestBody"]["content"].as_object().unwrap();
        assert!(content.contains_key("application/apply-patch+yaml"));
        assert!(content.contains_key("application/merge-patch+json"));
        assert!(content.contains_key("application/strategic-merge-patch+json"));
    }
    // deployments/{name} and deployments/{name}/status.
    assert_eq!(patch_ops, 2);

    let item = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    for method in ["get", "put", "patch", "delete"] {
        assert_eq!(
            item[method]["x-kubernetes-group-version-kind"], gvk,
            "{method}"
        );
    }
    assert_eq!(item["put"]["x-kubernetes-action"], "put");
    assert_eq!(
        item["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.Deployment"
    );
    let params: Vec<&str> = item["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, ["name", "namespace", "pretty"]);
    let collection = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"];
    assert_eq!(collection["get"]["x-kubernetes-action"], "list");
    assert_eq!(collection["post"]["x-kubernetes-action"], "post");
    assert_eq!(
        collection["delete"]["x-kubernetes-action"],
        "deletecollection"
    );
    assert_eq!(
        collection["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.DeploymentList"
    );
    let post_params: Vec<&str> = collection["post"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(post_params, ["dryRun", "fieldManager", "fieldValidation"]);
    assert_eq!(
        doc["paths"]["/apis/apps/v1/deployments"]["get"]["operationId"],
        "listAppsV1DeploymentForAllNamespaces"
    );
    // Scale is not served yet, so it is not in the document.
    assert!(
        doc["paths"]
            .get("/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale")
            .is_none()
    );
}

#[tokio::test]
async fn core_v1_has_pods_namespaces_and_explain_material() {
    let doc = get_json("/openapi/v3/api/v1", None).await;
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        serde_json::json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert_eq!(
        pod["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let spec = &schemas["io.k8s.api.core.v1.PodSpec"];
    assert_eq!(spec["required"], serde_json::json!(["containers"]));
    assert_eq!(
        spec["properties"]["containers"]["items"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.Container"
    );
    assert!(schemas.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
    assert!(schemas.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.Status"));
    // Not in core/v1.
    assert!(!schemas.contains_key("io.k8s.api.apps.v1.Deployment"));

    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.contains_key("/api/v1/namespaces/{namespace}/pods/{name}"));
    assert!(paths.contains_key("/api/v1/namespaces/{namespace}/pods/{name}/status"));
    assert!(paths.contains_key("/api/v1/pods"));
    // Namespaces are cluster-scoped and have no deletecollection.
    let ns = &paths["/api/v1/namespaces"];
    assert!(ns.get("delete").is_none());
    assert_eq!(
        paths["/api/v1/namespaces/{name}"]["patch"]["x-kubernetes-group-version-kind"],
        serde_json::json!({"group": "", "kind": "Namespace", "version": "v1"})
    );
    assert_eq!(
        paths["/api/v1/namespaces/{namespace}/pods"]["get"]["operationId"],
        "listCoreV1NamespacedPod"
    );
}

#[tokio::test]
async fn schemas_carry_upstreams_patch_and_list_extensions() {
    let core = get_json("/openapi/v3/api/v1", None).await;
    let schemas = &core["components"]["schemas"];
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["type"], "array");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(
        containers["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    let volumes = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["volumes"];
    assert_eq!(volumes["x-kubernetes-patch-strategy"], "merge,retainKeys");
    let ports = &schemas["io.k8s.api.core.v1.Container"]["properties"]["ports"];
    assert_eq!(
        ports["x-kubernetes-list-map-keys"],
        serde_json::json!(["containerPort", "protocol"])
    );
    assert_eq!(
        schemas["io.k8s.api.core.v1.Container"]["properties"]["args"]["x-kubernetes-list-type"],
        "atomic"
    );
    let node_selector = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["nodeSelector"];
    assert_eq!(node_selector["x-kubernetes-map-type"], "atomic");
    // Type-level `+structType=atomic` sits on the type's own schema.
    assert_eq!(
        schemas["io.k8s.api.core.v1.LocalObjectReference"]["x-kubernetes-map-type"],
        "atomic"
    );
    let meta = &schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"];
    assert_eq!(meta["finalizers"]["x-kubernetes-list-type"], "set");
    assert_eq!(
        meta["ownerReferences"]["x-kubernetes-list-map-keys"],
        serde_json::json!(["uid"])
    );
    assert_eq!(
        schemas["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"]["x-kubernetes-map-type"],
        "atomic"
    );
    // A field-level marker next to a `$ref` goes beside its `allOf` wrapper.
    let claim_ref = &schemas["io.k8s.api.core.v1.PersistentVolumeSpec"]["properties"]["claimRef"];
    assert_eq!(claim_ref["x-kubernetes-map-type"], "granular");
    assert!(claim_ref["allOf"][0]["$ref"].is_string(), "{claim_ref}");
}

#[test]
fn every_served_kind_has_a_type_and_a_patch_operation_with_field_validation() {
    let known = kinds::all();
    let docs = gv_documents();
    for r in Registry::builtin().resources() {
        let k = known
            .iter()
            .find(|k| (k.group, k.version, k.kind) == (r.group, r.version, r.kind))
            .unwrap_or_else(|| panic!("no type for {} {}", r.group, r.kind));
        let doc = &docs
            .iter()
            .find(|(key, _)| **key == gv_key(r.group, r.version))
            .unwrap()
            .1;
        let schema = &doc["components"]["schemas"][(k.schema_name)().as_ref()];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"][0]["kind"], r.kind,
            "{}",
            r.plural
        );
        let gvk = serde_json::json!({"group": r.group, "kind": r.kind, "version": r.version});
        let gated = doc["paths"].as_object().unwrap().values().any(|item| {
            item.get("patch").is_some_and(|p| {
                p["x-kubernetes-group-version-kind"] == gvk
                    && p["parameters"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p["name"] == "fieldValidation")
            })
        });
        assert!(gated || !r.has_verb("patch"), "{}", r.plural);
    }
}

#[test]
fn every_ref_resolves_and_no_ref_has_siblings() {
    fn walk(v: &Value, schemas: &serde_json::Map<String, Value>, where_: &str, count: &mut usize) {
        match v {
            Value::Object(map) => {
                // (`JSONSchemaProps` has a property called `$ref`: an object, not a reference.)
                if let Some(r) = map.get("$ref").filter(|r| r.is_string()) {
                    let name = r
                        .as_str()
                        .unwrap()
                        .strip_prefix("#/components/schemas/")
                        .unwrap_or_else(|| panic!("{where_}: {r}"));
                    assert!(schemas.contains_key(name), "{where_}: dangling {name}");
                    assert_eq!(map.len(), 1, "{where_}: $ref with siblings: {v}");
                    *count += 1;
                }
                map.values().for_each(|v| walk(v, schemas, where_, count));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, schemas, where_, count)),
            _ => {}
        }
    }
    let docs = gv_documents();
    assert!(docs.len() >= 15, "{}", docs.len());
    for (key, doc) in &docs {
        assert_eq!(doc["openapi"], "3.0.0");
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut count = 0;
        walk(doc, schemas, key, &mut count);
        assert!(count > 10, "{key}");
        // Nothing unreachable: every schema is referenced from somewhere.
        let mut referenced = Vec::new();
        schemas::refs_in(&doc["paths"], &mut referenced);
        let reachable = schemas::closure(schemas, referenced);
        assert_eq!(reachable.len(), schemas.len(), "{key}");
    }
}

#[tokio::test]
async fn matching_hash_is_immutable_stale_hash_redirects_no_hash_is_no_cache() {
    let hash = index_hash("apis/apps/v1").await;
    let path = "/openapi/v3/apis/apps/v1";

    let query = format!("hash={hash}&timeout=32s");
    let resp = api().serve_with(&[], path, Some(&query), Some("application/json"));
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, http::header::ETAG),
        Some(format!("\"{hash}\"").as_str())
    );
    assert_eq!(
        header(&resp, http::header::CACHE_CONTROL),
        Some("public, immutable")
    );
    assert_eq!(
        header(&resp, http::header::CONTENT_TYPE),
        Some("application/json")
    );
    let expires = header(&resp, http::header::EXPIRES).unwrap().to_owned();
    assert!(expires.ends_with(" GMT"), "{expires}");
    let next_year = (jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .year()
        + 1)
    .to_string();
    assert!(expires.contains(&next_year), "{expires}");
    let bytes = body(resp).await;
    assert_eq!(bytes, api().v3["apis/apps/v1"].body.to_vec());

    let resp = api().serve_with(
        &[],
        path,
        Some("hash=0123&timeout=32s"),
        Some("application/json"),
    );
    assert_eq!(resp.status(), StatusCode::MOVED_PERMANENTLY);
    assert_eq!(
        header(&resp, http::header::LOCATION),
        Some(format!("/openapi/v3/apis/apps/v1?hash={hash}").as_str())
    );

    let resp = api().serve_with(&[], path, Some("timeout=32s"), None);
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, http::header::CACHE_CONTROL),
        Some("no-cache, private")
    );
    assert_eq!(
        header(&resp, http::header::ETAG),
        Some(format!("\"{hash}\"").as_str())
    );
    assert!(header(&resp, http::header::EXPIRES).is_none());
}

#[tokio::test]
async fn accept_and_unknown_documents() {
    let path = "/openapi/v3/api/v1";
    for ok in [
        "application/json",
        "application/json, */*",
        "*/*",
        "application/*",
        "application/com.github.proto-openapi.spec.v3@v1.0+protobuf, application/json;q=0.9",
    ] {
        assert_eq!(
            api().serve_with(&[], path, None, Some(ok)).status(),
            StatusCode::OK,
            "{ok}"
        );
    }
    for refused in [
        "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
        "text/html",
        "application/json;q=0",
    ] {
        assert_eq!(
            api().serve_with(&[], path, None, Some(refused)).status(),
            StatusCode::NOT_ACCEPTABLE,
            "{refused}"
        );
    }
    assert_eq!(
        api()
            .serve("/openapi/v3", None, Some("application/yaml"))
            .status(),
        StatusCode::NOT_ACCEPTABLE
    );
    // kubectl's v2 request (protobuf only) gets the protobuf document; v2 refuses what is
    // neither JSON nor protobuf.
    let resp = api().serve_with(
        &[],
        "/openapi/v2",
        Some("timeout=32s"),
        Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
    );
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, http::header::CONTENT_TYPE),
        Some("application/octet-stream")
    );
    for (accept, expected) in [
        (
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            Some("application/octet-stream"),
        ),
        ("*/*", Some("application/json")),
        (
            "application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            Some("application/octet-stream"),
        ),
        ("text/html", None),
        (
            "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
            None,
        ),
    ] {
        let resp = api().serve_with(&[], "/openapi/v2", None, Some(accept));
        match expected {
            Some(t) => {
                assert_eq!(resp.status(), StatusCode::OK, "{accept}");
                assert_eq!(
                    header(&resp, http::header::CONTENT_TYPE),
                    Some(t),
                    "{accept}"
                );
            }
            None => assert_eq!(resp.status(), StatusCode::NOT_ACCEPTABLE, "{accept}"),
        }
    }
    for missing in [
        "/openapi/v3/apis/apps/v1beta1",
        "/openapi/v3/apis/resource.k8s.io/v1beta1",
        "/openapi/v3/",
        "/openapi/v3/api",
        "/openapi/v4",
    ] {
        assert_eq!(
            api()
                .serve(missing, None, Some("application/json"))
                .status(),
            StatusCode::NOT_FOUND,
            "{missing}"
        );
    }
}

#[tokio::test]
async fn v2_is_swagger_with_resolving_definitions() {
    let resp = api().serve_with(&[], "/openapi/v2", None, Some("application/json"));
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(header(&resp, http::header::ETAG).is_some());
    let doc: Value = serde_json::from_slice(&body(resp).await).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    let definitions = doc["definitions"].as_object().unwrap();
    assert_eq!(
        definitions["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"][0]["kind"],
        "Deployment"
    );
    let mut refs = 0;
    fn walk(v: &Value, defs: &serde_json::Map<String, Value>, refs: &mut usize) {
        match v {
            Value::Object(map) => {
                if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                    let name = r.strip_prefix("#/definitions/").unwrap();
                    assert!(defs.contains_key(name), "dangling {name}");
                    *refs += 1;
                }
                map.values().for_each(|v| walk(v, defs, refs));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, defs, refs)),
            _ => {}
        }
    }
    walk(&doc, definitions, &mut refs);
    assert!(refs > 100);
    let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(patch["parameters"][0]["in"], "body");
    assert!(
        patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["type"] == "string")
    );
    assert!(
        patch["consumes"]
            .as_array()
            .unwrap()
            .contains(&"application/merge-patch+json".into())
    );
}

#[test]
fn build_cost_and_sizes() {
    let started = std::time::Instant::now();
    let built = OpenApi::build(&Registry::builtin());
    let elapsed = started.elapsed();
    let total: usize = built.v3.values().map(|d| d.body.len()).sum();
    let largest = built
        .v3
        .iter()
        .max_by_key(|(_, d)| d.body.len())
        .map(|(k, d)| (k.clone(), d.body.len()))
        .unwrap();
    eprintln!(
        "openapi: built in {elapsed:?}; {} v3 documents, {total} bytes (largest {largest:?}, apps/v1 {}); index {} bytes; v2 {} bytes",
        built.v3.len(),
        built.v3["apis/apps/v1"].body.len(),
        built.index.len(),
        built.v2.body.len()
    );
    // Deterministic: a rebuild gives the same hashes (kubectl's cache keys).
    for (k, d) in &built.v3 {
        assert_eq!(d.hash, api().v3[k].hash, "{k}");
    }
}

/// The route as `server::router` adds it (`{*path}` must match both `/openapi/v3` and
/// `/openapi/v3/apis/apps/v1`).
#[tokio::test]
async fn serves_through_an_axum_route() {
    use axum::extract::Request;
    use axum::routing::get;
    use std::sync::Arc;
    use tower::ServiceExt as _;

    let registry = Registry::builtin();
    let app: axum::Router = axum::Router::new().route(
        "/openapi/{*path}",
        get({
            let api = Arc::new(crate::openapi::OpenApi::build(&registry));
            move |req: Request| {
                std::future::ready(
                    api.serve(
                        req.uri().path(),
                        req.uri().query(),
                        req.headers()
                            .get(http::header::ACCEPT)
                            .and_then(|v| v.to_str().ok()),
                    ),
                )
            }
        }),
    );
    let hash = index_hash("apis/apps/v1").await;
    for (uri, accept, status) in [
        (
            "/openapi/v3?timeout=32s",
            "application/json, */*",
            StatusCode::OK,
        ),
        (
            &*format!("/openapi/v3/apis/apps/v1?hash={hash}&timeout=32s"),
            "application/json",
            StatusCode::OK,
        ),
        (
            "/openapi/v3/apis/apps/v1?hash=x",
            "application/json",
            StatusCode::MOVED_PERMANENTLY,
        ),
        (
            "/openapi/v2?timeout=32s",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            StatusCode::OK,
        ),
        ("/openapi/v2", "application/json", StatusCode::OK),
        (
            "/openapi/v3/apis/nope/v1",
            "application/json",
            StatusCode::NOT_FOUND,
        ),
    ] {
        let req = Request::builder()
            .uri(uri)
            .header(http::header::ACCEPT, accept)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), status, "{uri}");
    }
}

async fn v2_protobuf() -> (Response, super::v2_proto::Document) {
    let resp = api().serve_with(
        &[],
        "/openapi/v2",
        None,
        Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
    );
    assert_eq!(resp.status(), StatusCode::OK);
    let (parts, b) = resp.into_parts();
    let bytes = axum::body::to_bytes(b, usize::MAX).await.unwrap();
    let doc = <super::v2_proto::Document as prost::Message>::decode(bytes.as_ref()).unwrap();
    (Response::from_parts(parts, axum::body::Body::empty()), doc)
}

fn named<'a>(list: &'a [super::v2_proto::NamedSchema], name: &str) -> &'a super::v2_proto::Schema {
    list.iter()
        .find(|n| n.name == name)
        .and_then(|n| n.value.as_ref())
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[tokio::test]
async fn v2_protobuf_round_trips_and_matches_the_json_document() {
    use super::v2_proto::*;
    let (resp, doc) = v2_protobuf().await;
    let json = get_json("/openapi/v2", None).await;
    // Its own ETag (the hash of the encoding), not the JSON form's.
    let json_resp = api().serve_with(&[], "/openapi/v2", None, Some("application/json"));
    assert_ne!(
        header(&resp, http::header::ETAG),
        header(&json_resp, http::header::ETAG)
    );
    assert_eq!(doc, document(&json));
    assert_eq!(doc.swagger, "2.0");
    assert_eq!(doc.info.as_ref().unwrap().title, "Kubernetes");
    let defs = &doc.definitions.as_ref().unwrap().additional_properties;
    assert_eq!(defs.len(), json["definitions"].as_object().unwrap().len());
    // The Pod definition: properties, type, description, the GVK extension as YAML.
    let pod = named(defs, "io.k8s.api.core.v1.Pod");
    assert_eq!(
        pod.r#type.as_ref().unwrap().value,
        vec!["object".to_owned()]
    );
    assert!(
        pod.description
            .starts_with("Pod is a collection of containers")
    );
    let props = &pod.properties.as_ref().unwrap().additional_properties;
    let names: Vec<&str> = props.iter().map(|p| p.name.as_str()).collect();
    for want in ["apiVersion", "kind", "metadata", "spec", "status"] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    assert_eq!(
        named(props, "spec").r#ref,
        "#/definitions/io.k8s.api.core.v1.PodSpec"
    );
    let gvk = pod
        .vendor_extension
        .iter()
        .find(|e| e.name == "x-kubernetes-group-version-kind")
        .and_then(|e| e.value.as_ref())
        .unwrap();
    let parsed: Value = serde_json::from_str(gvk.yaml.trim_end()).unwrap();
    assert_eq!(parsed[0]["kind"], "Pod");
    assert_eq!(parsed[0]["version"], "v1");
    // A scalar extension is a plain YAML scalar; containers are arrays of Container refs.
    let spec = named(defs, "io.k8s.api.core.v1.PodSpec");
    let spec_props = &spec.properties.as_ref().unwrap().additional_properties;
    let containers = named(spec_props, "containers");
    assert_eq!(
        containers.r#type.as_ref().unwrap().value,
        vec!["array".to_owned()]
    );
    assert_eq!(
        containers.items.as_ref().unwrap().schema[0].r#ref,
        "#/definitions/io.k8s.api.core.v1.Container"
    );
    let ext = |name: &str| {
        containers
            .vendor_extension
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.as_ref())
            .map(|a| a.yaml.clone())
    };
    assert_eq!(
        ext("x-kubernetes-patch-strategy").as_deref(),
        Some("merge\n")
    );
    assert_eq!(
        ext("x-kubernetes-patch-merge-key").as_deref(),
        Some("name\n")
    );
    let volumes = named(spec_props, "volumes");
    assert!(
        volumes
            .vendor_extension
            .iter()
            .any(|e| e.name == "x-kubernetes-patch-strategy"
                && e.value.as_ref().unwrap().yaml == "merge,retainKeys\n")
    );
    // A map: additionalProperties is a schema.
    let selector = named(spec_props, "nodeSelector");
    match selector
        .additional_properties
        .as_ref()
        .and_then(|a| a.oneof.as_ref())
    {
        Some(AdditionalProperties::Schema(s)) => {
            assert_eq!(s.r#type.as_ref().unwrap().value, vec!["string".to_owned()])
        }
        other => panic!("{other:?}"),
    }
    // A path's parameters: the path-level name/namespace parameters, the body of a create.
    let paths = &doc.paths.as_ref().unwrap().path;
    let item = paths
        .iter()
        .find(|p| p.name == "/api/v1/namespaces/{namespace}/pods/{name}")
        .and_then(|p| p.value.as_ref())
        .unwrap();
    let path_params: Vec<&str> = item
        .parameters
        .iter()
        .filter_map(|p| match p.parameter.as_ref()?.oneof.as_ref()? {
            ParameterKind::NonBodyParameter(NonBodyParameter {
                oneof: Some(NonBodyKind::Path(p)),
            }) => Some(p.name.as_str()),
            _ => None,
        })
        .collect();
    assert!(path_params.contains(&"name"), "{path_params:?}");
    assert!(path_params.contains(&"namespace"), "{path_params:?}");
    let get = item.get.as_ref().unwrap();
    assert!(
        get.responses
            .as_ref()
            .unwrap()
            .response_code
            .iter()
            .any(|r| r.name == "200")
    );
    assert!(
        get.vendor_extension
            .iter()
            .any(|e| e.name == "x-kubernetes-action" && e.value.as_ref().unwrap().yaml == "get\n")
    );
    let collection = paths
        .iter()
        .find(|p| p.name == "/api/v1/namespaces/{namespace}/pods")
        .and_then(|p| p.value.as_ref())
        .unwrap();
    let body_param = collection
        .post
        .as_ref()
        .unwrap()
        .parameters
        .iter()
        .find_map(|p| match p.parameter.as_ref()?.oneof.as_ref()? {
            ParameterKind::BodyParameter(b) => Some(b),
            _ => None,
        })
        .unwrap();
    assert_eq!(body_param.r#in, "body");
    assert!(body_param.required);
    assert_eq!(
        body_param.schema.as_ref().unwrap().r#ref,
        "#/definitions/io.k8s.api.core.v1.Pod"
    );
}

#[test]
fn yaml_scalars_read_back_as_the_same_value() {
    use super::v2_proto::yaml;
    assert_eq!(yaml(&serde_json::json!("merge")), "merge\n");
    assert_eq!(yaml(&serde_json::json!("true")), "\"true\"\n");
    assert_eq!(yaml(&serde_json::json!("1.5")), "\"1.5\"\n");
    assert_eq!(yaml(&serde_json::json!("a: b")), "\"a: b\"\n");
    assert_eq!(yaml(&serde_json::json!("")), "\"\"\n");
    assert_eq!(yaml(&serde_json::json!(true)), "true\n");
    assert_eq!(yaml(&serde_json::json!(["a", 1])), "[\"a\",1]\n");
}

#[tokio::test]
async fn v2_if_none_match_gets_304() {
    let proto = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let resp = api().serve_with(&[], "/openapi/v2", None, Some(proto));
    let etag = header(&resp, http::header::ETAG).unwrap().to_owned();
    let again = api().serve_conditional_with(&[], "/openapi/v2", None, Some(proto), Some(&etag));
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header(&again, http::header::ETAG), Some(etag.as_str()));
    assert!(body(again).await.is_empty());
    let stale = api().serve_conditional_with(&[], "/openapi/v2", None, Some(proto), Some("\"x\""));
    assert_eq!(stale.status(), StatusCode::OK);
}

fn widget_crd(description: &str) -> Value {
    serde_json::json!({
        "metadata": { "name": "widgets.example.com", "uid": "u1" },
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "kind": "Widget" },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {}, "scale": { "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas" } },
                "selectableFields": [{ "jsonPath": ".spec.color" }],
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "description": "A widget.",
                    "properties": {
                        "spec": { "type": "object", "properties": {
                            "size": { "type": "integer", "description": description, "default": 1 },
                            "color": { "type": "string" },
                            "replicas": { "type": "integer" },
                        } },
                    },
                } },
            }],
        },
        "status": {
            "acceptedNames": { "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList" },
            "conditions": [{ "type": "Established", "status": "True" }],
        },
    })
}

fn widget_versions(description: &str) -> Vec<crate::registry::custom::Served> {
    crate::registry::custom::versions_of(&widget_crd(description))
        .into_iter()
        .map(std::sync::Arc::new)
        .collect()
}

async fn custom_json(
    served: &[crate::registry::custom::Served],
    path: &str,
) -> (Value, Option<String>) {
    let resp = api().serve_with(served, path, None, Some("application/json"));
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    let etag = header(&resp, http::header::ETAG).map(str::to_owned);
    (serde_json::from_slice(&body(resp).await).unwrap(), etag)
}

#[tokio::test]
async fn custom_resources_get_a_v3_document_listed_in_the_index() {
    let served = widget_versions("How big the widget is.");
    let (index, _) = custom_json(&served, "/openapi/v3").await;
    let url = index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .expect("custom group version in the index")
        .to_owned();
    assert!(index["paths"]["apis/apps/v1"].is_object(), "built-ins stay");
    let (doc, etag) = custom_json(&served, "/openapi/v3/apis/example.com/v1").await;
    let hash = url.rsplit_once("?hash=").unwrap().1;
    assert_eq!(etag.as_deref(), Some(format!("\"{hash}\"").as_str()));

    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let widget = &schemas["com.example.v1.Widget"];
    assert_eq!(widget["description"], "A widget.");
    assert_eq!(
        widget["properties"]["spec"]["properties"]["size"]["description"],
        "How big the widget is."
    );
    assert_eq!(
        widget["properties"]["spec"]["properties"]["size"]["default"],
        1
    );
    assert_eq!(
        widget["x-kubernetes-group-version-kind"],
        serde_json::json!([{ "group": "example.com", "kind": "Widget", "version": "v1" }])
    );
    assert_eq!(
        widget["x-kubernetes-selectable-fields"],
        serde_json::json!([{ "fieldPath": "spec.color" }])
    );
    assert_eq!(
        widget["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(schemas.contains_key("com.example.v1.WidgetList"));
    assert!(schemas.contains_key("io.k8s.api.autoscaling.v1.Scale"));
    // Every reference resolves inside the document.
    let mut refs = Vec::new();
    super::schemas::refs_in(&doc, &mut refs);
    for r in &refs {
        assert!(schemas.contains_key(r), "{r} unresolved");
    }

    let paths = doc["paths"].as_object().unwrap();
    let mut keys: Vec<&str> = paths.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "/apis/example.com/v1/namespaces/{namespace}/widgets",
            "/apis/example.com/v1/namespaces/{namespace}/widgets/{name}",
            "/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/scale",
            "/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/status",
            "/apis/example.com/v1/widgets",
        ]
    );
    let item = &paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"];
    let patch = &item["patch"];
    assert_eq!(patch["operationId"], "patchExampleComV1NamespacedWidget");
    assert!(
        patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"),
        "kubectl's server-side validation gate"
    );
    let types: Vec<&String> = patch["requestBody"]["content"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(
        types,
        [
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json"
        ]
    );
    assert_eq!(
        item["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/com.example.v1.Widget"
    );
    let scale = &paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/scale"];
    assert_eq!(
        scale["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.autoscaling.v1.Scale"
    );

    // A changed description is a new document under a new hash; the old hash redirects.
    let changed = widget_versions("The size.");
    let (index2, _) = custom_json(&changed, "/openapi/v3").await;
    let url2 = index2["paths"]["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    assert_ne!(url, url2);
    let stale = api().serve_with(
        &changed,
        "/openapi/v3/apis/example.com/v1",
        Some(&format!("hash={hash}")),
        None,
    );
    assert_eq!(stale.status(), StatusCode::MOVED_PERMANENTLY);
    // The same content again (new handles) reuses the documents.
    let (index3, _) = custom_json(&widget_versions("The size."), "/openapi/v3").await;
    assert_eq!(index2, index3);
}

#[tokio::test]
async fn custom_resources_are_merged_into_v2() {
    let (_, builtin_etag) = custom_json(&[], "/openapi/v2").await;
    let served = widget_versions("How big the widget is.");
    let (v2, etag) = custom_json(&served, "/openapi/v2").await;
    assert_ne!(etag, builtin_etag, "the v2 ETag follows the CRDs");
    let defs = v2["definitions"].as_object().unwrap();
    assert!(defs.contains_key("io.k8s.api.apps.v1.Deployment"));
    let widget = &defs["com.example.v1.Widget"];
    let size = &widget["properties"]["spec"]["properties"]["size"];
    assert_eq!(size["description"], "How big the widget is.");
    assert!(size.get("default").is_none(), "defaults pruned in v2");
    assert_eq!(
        widget["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let patch = &v2["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert_eq!(
        patch["consumes"],
        serde_json::json!([
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json"
        ])
    );
    assert_eq!(
        patch["parameters"][0]["schema"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    );
    // The protobuf encoding carries the custom definition too.
    let resp = api().serve_with(
        &served,
        "/openapi/v2",
        None,
        Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
    );
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = body(resp).await;
    let doc = <super::v2_proto::Document as prost::Message>::decode(bytes.as_slice()).unwrap();
    let names: Vec<&str> = doc
        .definitions
        .as_ref()
        .unwrap()
        .additional_properties
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert!(names.contains(&"com.example.v1.Widget"));
}

#[tokio::test]
async fn without_custom_resources_the_built_in_documents_are_served_as_built() {
    let resp = api().serve_with(&[], "/openapi/v3", None, None);
    assert_eq!(body(resp).await, api().index.to_vec());
    let resp = api().serve_with(&[], "/openapi/v3/apis/example.com/v1", None, None);
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}
