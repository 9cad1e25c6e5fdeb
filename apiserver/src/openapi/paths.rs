//! `paths`: the REST endpoints of each served resource, shaped like kube-apiserver's: collection
//! and item paths (namespaced ones under `namespaces/{namespace}`, plus the all-namespaces
//! list), the `status` subresource, one operation per verb, each with
//! `x-kubernetes-action` and a single-object `x-kubernetes-group-version-kind`.
//!
//! kubectl reads two things here: whether the kind's `patch` operation lists the
//! `fieldValidation` parameter (then it validates on the server, `fieldValidation=Strict`), and
//! whether its request body accepts `application/strategic-merge-patch+json` (then `apply`
//! computes its patch from the schemas). Every `patch` operation of a kind must agree, because
//! kubectl stops at the first one it finds in a map.

use serde_json::{Map, Value, json};

use super::schemas::{MetaNames, reference};
use crate::registry::SERVED_SUBRESOURCES;
use crate::registry::catalog::ResourceInfo;

/// Patch content types advertised, as upstream's. kubectl builds client-side apply's strategic
/// merge patch from the v3 schemas (their `x-kubernetes-patch-*` extensions, see the
/// `extensions` module) when the kind's patch operation lists
/// `application/strategic-merge-patch+json`.
pub(crate) const PATCH_CONTENT_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// Patch content types of a custom resource, as upstream's CRD builder lists them: no
/// strategic merge patch (custom resources refuse it with 415), so kubectl's client-side apply
/// sends a JSON merge patch.
pub(crate) const CUSTOM_PATCH_CONTENT_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// Query parameters: name, schema type, description.
const QUERY_PARAMS: &[(&str, &str, &str)] = &[
    (
        "allowWatchBookmarks",
        "boolean",
        "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. If this is not a watch, this field is ignored.",
    ),
    (
        "continue",
        "string",
        "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue).",
    ),
    (
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
    ),
    (
        "fieldManager",
        "string",
        "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint. This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch).",
    ),
    (
        "fieldSelector",
        "string",
        "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
    ),
    (
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default. - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
    ),
    (
        "force",
        "boolean",
        "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
    ),
    (
        "gracePeriodSeconds",
        "integer",
        "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used.",
    ),
    (
        "labelSelector",
        "string",
        "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
    ),
    (
        "limit",
        "integer",
        "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results.",
    ),
    (
        "orphanDependents",
        "boolean",
        "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned.",
    ),
    (
        "pretty",
        "string",
        "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
    ),
    (
        "propagationPolicy",
        "string",
        "Whether and how garbage collection will be performed. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
    ),
    (
        "resourceVersion",
        "string",
        "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
    ),
    (
        "resourceVersionMatch",
        "string",
        "resourceVersionMatch determines how resourceVersion is applied to list calls. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
    ),
    (
        "sendInitialEvents",
        "boolean",
        "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection.",
    ),
    (
        "timeoutSeconds",
        "integer",
        "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
    ),
    (
        "watch",
        "boolean",
        "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
    ),
];

/// A query parameter from [`QUERY_PARAMS`].
fn query(name: &str) -> Value {
    let (ty, description) = QUERY_PARAMS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or(("string", ""), |(_, t, d)| (*t, *d));
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": { "type": ty, "uniqueItems": true },
    })
}

fn queries(names: &[&str]) -> Vec<Value> {
    names.iter().map(|n| query(n)).collect()
}

fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": { "type": "string", "uniqueItems": true },
    })
}

/// `{"<type>": {"schema": {"$ref": ...}}}` for each content type.
fn content(schema: &str, types: &[&str]) -> Value {
    let mut map = Map::new();
    for t in types {
        map.insert((*t).to_owned(), json!({ "schema": reference(schema) }));
    }
    Value::Object(map)
}

const JSON: &[&str] = &["application/json", "application/yaml"];
const JSON_AND_WATCH: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/json;stream=watch",
];

/// Responses with the given status codes, all returning `schema`.
fn responses(schema: &str, codes: &[(&str, &str)], types: &[&str]) -> Value {
    let mut map = Map::new();
    for (code, description) in codes {
        map.insert(
            (*code).to_owned(),
            json!({ "description": description, "content": content(schema, types) }),
        );
    }
    map.insert("401".to_owned(), json!({ "description": "Unauthorized" }));
    Value::Object(map)
}

/// `rbac.authorization.k8s.io` → `RbacAuthorization`, `""` → `Core` (upstream's operation-id
/// spelling of a group: `.k8s.io` trimmed, every other non-alphanumeric character dropped and
/// the letter after it capitalized, as `ToValidOperationID`).
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".to_owned();
    }
    let trimmed = group.strip_suffix(".k8s.io").unwrap_or(group);
    trimmed
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(capitalize)
        .collect()
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The tag of a group version: `apps_v1`, `core_v1`, `rbacAuthorization_v1`.
pub(crate) fn tag(group: &str, version: &str) -> String {
    let camel = group_camel(group);
    let mut chars = camel.chars();
    let lower: String = match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    };
    format!("{lower}_{version}")
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub(crate) fn gv_prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// What every operation of one resource shares.
struct Ctx<'a> {
    r: &'a ResourceInfo,
    schema: &'a str,
    list_schema: String,
    meta: &'a MetaNames,
    /// `AppsV1`.
    id_gv: String,
    tag: String,
    gvk: Value,
    /// What the `patch` operations accept.
    patch_types: &'a [&'a str],
}

impl Ctx<'_> {
    fn op(
        &self,
        action: &str,
        description: String,
        operation_id: String,
        parameters: Vec<Value>,
        request_body: Option<Value>,
        responses: Value,
    ) -> Value {
        let mut op = Map::new();
        op.insert("description".to_owned(), Value::String(description));
        op.insert("operationId".to_owned(), Value::String(operation_id));
        op.insert("parameters".to_owned(), Value::Array(parameters));
        if let Some(body) = request_body {
            op.insert("requestBody".to_owned(), body);
        }
        op.insert("responses".to_owned(), responses);
        op.insert("tags".to_owned(), json!([self.tag]));
        op.insert("x-kubernetes-action".to_owned(), json!(action));
        op.insert(
            "x-kubernetes-group-version-kind".to_owned(),
            self.gvk.clone(),
        );
        Value::Object(op)
    }

    /// A list's responses: the `<Kind>List`, or with `watch=true` a stream of `WatchEvent`s.
    fn list_responses(&self) -> Value {
        let mut responses = responses(&self.list_schema, &[("200", "OK")], JSON_AND_WATCH);
        if let Some(watch) = responses.pointer_mut("/200/content/application~1json;stream=watch") {
            *watch = json!({ "schema": reference(&self.meta.watch_event) });
        }
        responses
    }

    fn body(&self, schema: &str, types: &[&str]) -> Value {
        json!({ "content": content(schema, types), "required": true })
    }

    /// Operations on the collection: list (GET), create (POST), deletecollection (DELETE).
    fn collection(&self, scope: &str, path_params: Vec<Value>) -> Value {
        let r = self.r;
        let (kind, id_gv) = (r.kind, &self.id_gv);
        let mut item = Map::new();
        if r.has_verb("list") {
            item.insert(
                "get".to_owned(),
                self.op(
                    "list",
                    format!("list or watch objects of kind {kind}"),
                    format!("list{id_gv}{scope}{kind}"),
                    queries(&[
                        "allowWatchBookmarks",
                        "continue",
                        "fieldSelector",
                        "labelSelector",
                        "limit",
                        "resourceVersion",
                        "resourceVersionMatch",
                        "sendInitialEvents",
                        "timeoutSeconds",
                        "watch",
                    ]),
                    None,
                    self.list_responses(),
                ),
            );
        }
        if r.has_verb("create") {
            item.insert(
                "post".to_owned(),
                self.op(
                    "post",
                    format!("create a {kind}"),
                    format!("create{id_gv}{scope}{kind}"),
                    queries(&["dryRun", "fieldManager", "fieldValidation"]),
                    Some(self.body(self.schema, &["application/json", "application/yaml"])),
                    responses(
                        self.schema,
                        &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
                        JSON,
                    ),
                ),
            );
        }
        if r.has_verb("deletecollection") {
            item.insert(
                "delete".to_owned(),
                self.op(
                    "deletecollection",
                    format!("delete collection of {kind}"),
                    format!("delete{id_gv}Collection{scope}{kind}"),
                    queries(&[
                        "continue",
                        "dryRun",
                        "fieldSelector",
                        "gracePeriodSeconds",
                        "labelSelector",
                        "limit",
                        "orphanDependents",
                        "propagationPolicy",
                        "resourceVersion",
                        "resourceVersionMatch",
                        "sendInitialEvents",
                        "timeoutSeconds",
                    ]),
                    Some(json!({
                        "content": content(&self.meta.delete_options, &["application/json", "application/yaml"]),
                    })),
                    responses(&self.meta.status, &[("200", "OK")], JSON),
                ),
            );
        }
        let mut params = path_params;
        params.push(query("pretty"));
        item.insert("parameters".to_owned(), Value::Array(params));
        Value::Object(item)
    }

    /// Operations on one object (`sub` is `Some("status")` for the status subresource):
    /// read (GET), replace (PUT), patch (PATCH), delete (DELETE); `schema` is what they read
    /// and write (the kind's, or the `Scale` of a scale subresource).
    fn object(
        &self,
        scope: &str,
        sub: Option<&str>,
        verbs: &[&str],
        path_params: Vec<Value>,
        schema: &str,
    ) -> Value {
        let kind = self.r.kind;
        let id_gv = &self.id_gv;
        let (what, id_sub) = match sub {
            Some(s) => (format!("status of the specified {kind}"), capitalize(s)),
            None => (format!("the specified {kind}"), String::new()),
        };
        let id = |verb: &str| format!("{verb}{id_gv}{scope}{kind}{id_sub}");
        let mut item = Map::new();
        if verbs.contains(&"get") {
            item.insert(
                "get".to_owned(),
                self.op(
                    "get",
                    format!("read {what}"),
                    id("read"),
                    Vec::new(),
                    None,
                    responses(schema, &[("200", "OK")], JSON),
                ),
            );
        }
        if verbs.contains(&"update") {
            item.insert(
                "put".to_owned(),
                self.op(
                    "put",
                    format!("replace {what}"),
                    id("replace"),
                    queries(&["dryRun", "fieldManager", "fieldValidation"]),
                    Some(self.body(schema, &["application/json", "application/yaml"])),
                    responses(schema, &[("200", "OK"), ("201", "Created")], JSON),
                ),
            );
        }
        if verbs.contains(&"patch") {
            item.insert(
                "patch".to_owned(),
                self.op(
                    "patch",
                    format!("partially update {what}"),
                    id("patch"),
                    queries(&["dryRun", "fieldManager", "fieldValidation", "force"]),
                    Some(self.body(&self.meta.patch, self.patch_types)),
                    responses(schema, &[("200", "OK"), ("201", "Created")], JSON),
                ),
            );
        }
        if sub.is_none() && verbs.contains(&"delete") {
            item.insert(
                "delete".to_owned(),
                self.op(
                    "delete",
                    format!("delete a {kind}"),
                    id("delete"),
                    queries(&[
                        "dryRun",
                        "gracePeriodSeconds",
                        "orphanDependents",
                        "propagationPolicy",
                    ]),
                    Some(json!({
                        "content": content(&self.meta.delete_options, &["application/json", "application/yaml"]),
                    })),
                    responses(
                        &self.meta.status,
                        &[("200", "OK"), ("202", "Accepted")],
                        JSON,
                    ),
                ),
            );
        }
        let mut params = path_params;
        params.push(query("pretty"));
        item.insert("parameters".to_owned(), Value::Array(params));
        Value::Object(item)
    }
}

/// Adds the paths of built-in resource `r`, whose kind's schema is `schema`, to `paths`.
pub(crate) fn add_resource(
    paths: &mut Map<String, Value>,
    r: &ResourceInfo,
    schema: &str,
    meta: &MetaNames,
) {
    add(paths, r, schema, meta, PATCH_CONTENT_TYPES, None);
}

/// Adds the paths of custom resource `r` (schema `schema`) to `paths`, as upstream's CRD
/// builder does: the built-in shapes, patches without strategic merge, and the `scale`
/// subresource (autoscaling/v1 `Scale`) when the CRD enables it.
pub(crate) fn add_custom_resource(
    paths: &mut Map<String, Value>,
    r: &ResourceInfo,
    schema: &str,
    meta: &MetaNames,
) {
    add(
        paths,
        r,
        schema,
        meta,
        CUSTOM_PATCH_CONTENT_TYPES,
        Some(&meta.scale),
    );
}

/// The paths of `r`; `scale` is the schema of its `scale` subresource when that is listed.
fn add(
    paths: &mut Map<String, Value>,
    r: &ResourceInfo,
    schema: &str,
    meta: &MetaNames,
    patch_types: &[&str],
    scale: Option<&str>,
) {
    let ctx = Ctx {
        r,
        schema,
        list_schema: format!("{schema}List"),
        meta,
        id_gv: format!("{}{}", group_camel(r.group), capitalize(r.version)),
        tag: tag(r.group, r.version),
        gvk: json!({ "group": r.group, "kind": r.kind, "version": r.version }),
        patch_types,
    };
    let prefix = gv_prefix(r.group, r.version);
    let plural = r.plural;
    let name_param = || path_param("name", &format!("name of the {}", r.kind));
    let (collection, scope, mut scoped_params) = if r.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{plural}"),
            "Namespaced",
            vec![path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            )],
        )
    } else {
        (format!("{prefix}/{plural}"), "", Vec::new())
    };
    let collection_ops = ctx.collection(scope, scoped_params.clone());
    if has_operations(&collection_ops) {
        paths.insert(collection.clone(), collection_ops);
    }
    if r.namespaced && r.has_verb("list") {
        // The all-namespaces list: `list<GV><Kind>ForAllNamespaces`, GET only.
        let mut all = ctx.collection("", Vec::new());
        if let Some(map) = all.as_object_mut() {
            map.retain(|k, _| k == "get" || k == "parameters");
            if let Some(get) = map.get_mut("get").and_then(Value::as_object_mut) {
                get.insert(
                    "operationId".to_owned(),
                    json!(format!("list{}{}ForAllNamespaces", ctx.id_gv, r.kind)),
                );
            }
        }
        paths.insert(format!("{prefix}/{plural}"), all);
    }
    scoped_params.insert(0, name_param());
    let item_ops = ctx.object(scope, None, r.verbs, scoped_params.clone(), schema);
    if has_operations(&item_ops) {
        paths.insert(format!("{collection}/{{name}}"), item_ops);
    }
    for sub in r.subresources {
        let sub_schema = match (sub.name, scale) {
            // The subresources that read and write the parent kind.
            ("status" | "approval" | "ephemeralcontainers", _) => schema,
            ("scale", Some(scale)) => scale,
            _ => continue,
        };
        if !SERVED_SUBRESOURCES.contains(&sub.name) {
            continue;
        }
        let ops = ctx.object(
            scope,
            Some(sub.name),
            sub.verbs,
            scoped_params.clone(),
            sub_schema,
        );
        if has_operations(&ops) {
            paths.insert(format!("{collection}/{{name}}/{}", sub.name), ops);
        }
    }
}

/// Adds `GET <prefix>/` (the group version's `APIResourceList`).
pub(crate) fn add_resource_list(
    paths: &mut Map<String, Value>,
    group: &str,
    version: &str,
    meta: &MetaNames,
) {
    paths.insert(
        format!("{}/", gv_prefix(group, version)),
        json!({
            "get": {
                "description": "get available resources",
                "operationId": format!("get{}{}APIResources", group_camel(group), capitalize(version)),
                "responses": responses(&meta.api_resource_list, &[("200", "OK")], JSON),
                "tags": [tag(group, version)],
            }
        }),
    );
}

fn has_operations(path_item: &Value) -> bool {
    path_item
        .as_object()
        .is_some_and(|m| m.keys().any(|k| k != "parameters"))
}
