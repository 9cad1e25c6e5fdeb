//! Validation and defaulting of the CustomResourceDefinition object itself, as upstream's
//! `apiextensions-apiserver/pkg/apis/apiextensions/validation` (`ValidateCustomResourceDefinition`
//! and `…Update`) and `v1/defaults.go` (v1.33) do them for `apiextensions.k8s.io/v1`.
//!
//! Upstream validates the internal form of the CRD, and the v1 → internal conversion moves
//! per-version `schema`, `subresources`, `additionalPrinterColumns` and `selectableFields`
//! that are identical in every version to the top level. Error paths follow: a CRD with one
//! version (or the same schema in all) reports `spec.validation.openAPIV3Schema…`,
//! `spec.subresources.scale.specReplicasPath`, `spec.additionalPrinterColumns[0].type`, and
//! one with differing versions `spec.versions[1].schema.openAPIV3Schema…`; the webhook
//! conversion settings are `spec.conversion.webhookClientConfig` and
//! `spec.conversion.conversionReviewVersions`. [`schema_path`] gives the schema's path for the
//! structural-schema checks (`crd::schema`), which are not done here; neither are the
//! generic metadata checks (name syntax, labels, …) of `handlers::object`.
//!
//! Call order, as upstream's registry: [`default_crd`], the status preparation of
//! `crd::naming` (`status_on_create` / `status_on_update`), then [`validate_crd`].

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value, json};

use crate::error::FieldError;

/// Upstream's `MaxSelectableFields`.
const MAX_SELECTABLE_FIELDS: usize = 8;

/// The printer column types, sorted as upstream lists them.
const COLUMN_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];

/// The printer column formats, sorted as upstream lists them.
const COLUMN_FORMATS: &[&str] = &[
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];

/// The `JSONSchemaProps` fields allowed at the root of a schema when the status subresource
/// is enabled (upstream's Go field names, for the message).
const ROOT_FIELDS_GO: &str = "[Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations]";

/// The JSON keys of [`ROOT_FIELDS_GO`].
const ROOT_FIELDS: &[&str] = &[
    "description",
    "type",
    "format",
    "title",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "required",
    "items",
    "properties",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];

/// The annotation protected groups (`*.k8s.io`, `*.kubernetes.io`) must carry.
const API_APPROVED: &str = "api-approved.kubernetes.io";

/// Upstream's v1 defaulting (`SetObjectDefaults_CustomResourceDefinition`): `names.singular`
/// = lower-case `kind`, `names.listKind` = `<kind>List`, `conversion.strategy: None` when
/// `conversion` is absent, a webhook service's `port` 443, and `status.storedVersions` = the
/// storage version when empty.
pub fn default_crd(crd: &mut Value) {
    let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if text(names.get("singular")).is_empty() {
            names.insert("singular".into(), Value::from(kind.to_lowercase()));
        }
        if text(names.get("listKind")).is_empty() && !kind.is_empty() {
            names.insert("listKind".into(), Value::from(format!("{kind}List")));
        }
    }
    if matches!(spec.get("conversion"), None | Some(Value::Null)) {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
    if let Some(service) = spec
        .get_mut("conversion")
        .and_then(|c| c.get_mut("webhook"))
        .and_then(|w| w.get_mut("clientConfig"))
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
        && matches!(service.get("port"), None | Some(Value::Null))
    {
        service.insert("port".into(), Value::from(443));
    }
    let storage = storage_version(crd).map(str::to_owned);
    if let (Some(v), Some(obj)) = (storage, crd.as_object_mut()) {
        let status = obj
            .entry("status")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(status) = status.as_object_mut() {
            let empty = status
                .get("storedVersions")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
            if empty {
                status.insert("storedVersions".into(), json!([v]));
            }
        }
    }
}

/// The field path of version `index`'s `openAPIV3Schema` in error messages:
/// `spec.validation.openAPIV3Schema` when every version has the same schema (upstream moves it
/// to the top level), else `spec.versions[<index>].schema.openAPIV3Schema`.
pub fn schema_path(crd: &Value, index: usize) -> String {
    let versions = array(crd.pointer("/spec/versions"));
    if identical(versions, "schema", false) {
        "spec.validation.openAPIV3Schema".to_owned()
    } else {
        format!("spec.versions[{index}].schema.openAPIV3Schema")
    }
}

/// Upstream's `ValidateCustomResourceDefinition` (`old` absent) or
/// `ValidateCustomResourceDefinitionUpdate` (`old` the stored CRD) for a defaulted v1 CRD whose
/// status has been prepared; every problem with upstream's path, reason and message, except
/// the structural-schema rules and generic metadata checks (see the module doc).
pub fn validate_crd(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = crd.get("spec").unwrap_or(&Value::Null);
    let names = spec.get("names").unwrap_or(&Value::Null);
    let group = text(spec.get("group"));

    // metadata.name: the name function's extra rule (its syntax is checked with all objects').
    let name = text(crd.pointer("/metadata/name"));
    let required_name = format!("{}.{group}", text(names.get("plural")));
    if !name.is_empty() && name != required_name {
        errs.push(invalid(
            "metadata.name",
            &go_quote(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }

    let opts = Options::new(old);
    validate_spec(&mut errs, crd, &opts);

    if let Some(old) = old {
        let old_spec = old.get("spec").unwrap_or(&Value::Null);
        if opts.immutable_names {
            immutable(&mut errs, spec, old_spec, "scope", "spec.scope");
            immutable(
                &mut errs,
                names,
                &old_spec["names"],
                "kind",
                "spec.names.kind",
            );
        }
        immutable(&mut errs, spec, old_spec, "group", "spec.group");
        immutable(
            &mut errs,
            names,
            &old_spec["names"],
            "plural",
            "spec.names.plural",
        );
    }

    validate_names(
        &mut errs,
        crd.pointer("/status/acceptedNames").unwrap_or(&Value::Null),
        "status.acceptedNames",
    );
    validate_stored_versions(&mut errs, crd);
    validate_api_approval(&mut errs, crd, old);
    let old_preserves = old.is_some_and(preserve_unknown_fields);
    if !old_preserves && preserve_unknown_fields(crd) {
        errs.push(invalid(
            "spec.preserveUnknownFields",
            "true",
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
    errs
}

/// Upstream's `ValidateUpdateCustomResourceDefinitionStatus` (a write to the `status`
/// subresource): the accepted names' syntax.
pub fn validate_crd_status(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_names(
        &mut errs,
        crd.pointer("/status/acceptedNames").unwrap_or(&Value::Null),
        "status.acceptedNames",
    );
    errs
}

/// Upstream's `validationOptions` that matter here.
struct Options {
    /// `requireOpenAPISchema`: every version needs a schema (false on update when the stored
    /// CRD already lacked one).
    require_schema: bool,
    /// `requireRecognizedConversionReviewVersion`.
    require_recognized_review_version: bool,
    /// `requireImmutableNames`: the stored CRD is established.
    immutable_names: bool,
    /// `allowInvalidCABundle`.
    allow_invalid_ca_bundle: bool,
}

impl Options {
    fn new(old: Option<&Value>) -> Options {
        let Some(old) = old else {
            return Options {
                require_schema: true,
                require_recognized_review_version: true,
                immutable_names: false,
                allow_invalid_ca_bundle: true,
            };
        };
        let established = old
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| text(c.get("type")) == "Established"))
            .is_some_and(|c| text(c.get("status")) == "True");
        let old_reviews = array(old.pointer("/spec/conversion/webhook/conversionReviewVersions"));
        let old_conversion = old.pointer("/spec/conversion").filter(|c| !c.is_null());
        let old_bundle = text(old.pointer("/spec/conversion/webhook/clientConfig/caBundle"));
        Options {
            require_schema: array(old.pointer("/spec/versions")).iter().all(|v| {
                v.pointer("/schema/openAPIV3Schema")
                    .is_some_and(|s| !s.is_null())
            }),
            require_recognized_review_version: old_conversion.is_none()
                || old_reviews.is_empty()
                || old_reviews
                    .iter()
                    .any(|v| matches!(v.as_str(), Some("v1" | "v1beta1"))),
            immutable_names: established,
            allow_invalid_ca_bundle: if !established {
                true
            } else if old_bundle.is_empty() {
                false
            } else {
                ca_bundle_error(old_bundle).is_some()
            },
        }
    }
}

/// `validateCustomResourceDefinitionSpec` on the internal form.
fn validate_spec(errs: &mut Vec<FieldError>, crd: &Value, opts: &Options) {
    let spec = crd.get("spec").unwrap_or(&Value::Null);
    let versions = array(spec.get("versions"));
    let group = text(spec.get("group"));

    if group.is_empty() {
        errs.push(required("spec.group", ""));
    } else {
        let problems = dns1123_subdomain_errors(group);
        if !problems.is_empty() {
            errs.push(invalid("spec.group", &go_quote(group), &problems.join(",")));
        } else if !group.contains('.') {
            errs.push(invalid(
                "spec.group",
                &go_quote(group),
                "should be a domain with at least one dot",
            ));
        }
    }
    enum_string(
        errs,
        "spec.scope",
        text(spec.get("scope")),
        &["Cluster", "Namespaced"],
    );

    // The internal form: fields identical in every version live at the top level.
    let hoist_schema = identical(versions, "schema", false);
    let hoist_subresources = identical(versions, "subresources", false);
    let hoist_columns = identical(versions, "additionalPrinterColumns", true);
    let hoist_selectable = identical(versions, "selectableFields", true);
    let first = versions.first();
    let top = |key: &str, hoisted: bool| -> Option<&Value> {
        if hoisted {
            first.and_then(|v| v.get(key)).filter(|v| !v.is_null())
        } else {
            None
        }
    };
    let top_schema = top("schema", hoist_schema);
    let top_subresources = top("subresources", hoist_subresources);
    let per_version = |v: &'_ Value, key: &str, hoisted: bool| -> Option<Value> {
        if hoisted {
            None
        } else {
            v.get(key).filter(|x| !x.is_null()).cloned()
        }
    };

    let preserve = preserve_unknown_fields(crd);
    let top_has_schema = top_schema
        .and_then(|s| s.get("openAPIV3Schema"))
        .is_some_and(|s| !s.is_null());
    if opts.require_schema {
        if !top_has_schema {
            for (i, v) in versions.iter().enumerate() {
                let has = per_version(v, "schema", hoist_schema)
                    .and_then(|s| s.get("openAPIV3Schema").cloned())
                    .is_some_and(|s| !s.is_null());
                if !has {
                    errs.push(required(
                        &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        "schemas are required",
                    ));
                }
            }
        }
    } else if !preserve && !top_has_schema {
        for (i, v) in versions.iter().enumerate() {
            let has = per_version(v, "schema", hoist_schema)
                .and_then(|s| s.get("openAPIV3Schema").cloned())
                .is_some_and(|s| !s.is_null());
            if bool_at(v, "served") && !has {
                errs.push(required(
                    &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    "because otherwise all fields are pruned",
                ));
            }
        }
    }
    let has_defaults = versions
        .iter()
        .filter_map(|v| v.pointer("/schema/openAPIV3Schema"))
        .any(schema_has_default);
    if has_defaults && preserve {
        errs.push(invalid(
            "spec.preserveUnknownFields",
            "true",
            "must be false in order to use defaults in the schema",
        ));
    }

    let any_status = versions.iter().any(|v| {
        v.pointer("/subresources/status")
            .is_some_and(|s| !s.is_null())
    });
    let mut storage_count = 0;
    let mut seen = HashSet::new();
    let mut unique = true;
    for (i, v) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let vname = text(v.get("name"));
        if bool_at(v, "storage") {
            storage_count += 1;
        }
        if !seen.insert(vname) {
            unique = false;
        }
        let problems = dns1035_label_errors(vname);
        if !problems.is_empty() {
            errs.push(invalid(
                &format!("{path}.name"),
                &go_quote(vname),
                &problems.join(","),
            ));
        }
        // validateCustomResourceDefinitionVersion
        validate_deprecation(errs, v, &path);
        let subresources = if hoist_subresources {
            top_subresources.cloned()
        } else {
            per_version(v, "subresources", false)
        };
        let status_enabled = subresources
            .as_ref()
            .and_then(|s| s.get("status"))
            .is_some_and(|s| !s.is_null());
        if let Some(schema) = per_version(v, "schema", hoist_schema) {
            validate_root_schema(errs, &schema, status_enabled, &format!("{path}.schema"));
        }
        if let Some(sub) = per_version(v, "subresources", hoist_subresources) {
            validate_subresources(errs, &sub, &format!("{path}.subresources"));
        }
        if let Some(cols) = per_version(v, "additionalPrinterColumns", hoist_columns) {
            for (j, col) in array(Some(&cols)).iter().enumerate() {
                validate_column(errs, col, &format!("{path}.additionalPrinterColumns[{j}]"));
            }
        }
        let selectable = per_version(v, "selectableFields", hoist_selectable);
        if let Some(fields) = selectable.filter(|f| !array(Some(f)).is_empty()) {
            let schema = v
                .pointer("/schema/openAPIV3Schema")
                .filter(|s| !s.is_null());
            match schema {
                None => errs.push(invalid(
                    &format!("{path}.selectableFields"),
                    "\"\"",
                    "selectableFields may only be set when version.schema.openAPIV3Schema is not included",
                )),
                Some(schema) => validate_selectable_fields(
                    errs,
                    array(Some(&fields)),
                    schema,
                    &format!("{path}.selectableFields"),
                ),
            }
        }
    }
    if !unique {
        errs.push(invalid(
            "spec.versions",
            &go_versions(
                versions,
                [
                    hoist_schema,
                    hoist_subresources,
                    hoist_columns,
                    hoist_selectable,
                ],
            ),
            "must contain unique version names",
        ));
    }
    if storage_count != 1 {
        errs.push(invalid(
            "spec.versions",
            &go_versions(
                versions,
                [
                    hoist_schema,
                    hoist_subresources,
                    hoist_columns,
                    hoist_selectable,
                ],
            ),
            "must have exactly one version marked as storage version",
        ));
    }
    // The internal `spec.version` is a copy of the first version's name.
    if let Some(first_name) = first.map(|v| text(v.get("name"))).filter(|n| !n.is_empty()) {
        let problems = dns1035_label_errors(first_name);
        if !problems.is_empty() {
            errs.push(invalid(
                "spec.version",
                &go_quote(first_name),
                &problems.join(","),
            ));
        }
    }

    let names = spec.get("names").unwrap_or(&Value::Null);
    for key in ["plural", "singular", "kind", "listKind"] {
        if text(names.get(key)).is_empty() {
            errs.push(required(&format!("spec.names.{key}"), ""));
        }
    }
    validate_names(errs, names, "spec.names");

    if let Some(schema) = top_schema {
        validate_root_schema(errs, schema, any_status, "spec.validation");
    }
    if let Some(sub) = top_subresources {
        validate_subresources(errs, sub, "spec.subresources");
    }
    if hoist_columns {
        for (j, col) in array(first.and_then(|v| v.get("additionalPrinterColumns")))
            .iter()
            .enumerate()
        {
            validate_column(errs, col, &format!("spec.additionalPrinterColumns[{j}]"));
        }
    }
    let top_selectable = if hoist_selectable {
        array(first.and_then(|v| v.get("selectableFields")))
    } else {
        &[]
    };
    if !top_selectable.is_empty() {
        match top_schema {
            None => errs.push(invalid(
                "spec.selectableFields",
                "\"\"",
                "selectableFields may only be set when validations.schema is included",
            )),
            Some(s) => validate_selectable_fields(
                errs,
                top_selectable,
                s.get("openAPIV3Schema").unwrap_or(&Value::Null),
                "spec.selectableFields",
            ),
        }
    }

    let conversion = spec.get("conversion").filter(|c| !c.is_null());
    let strategy = conversion.map(|c| text(c.get("strategy"))).unwrap_or("");
    if conversion.is_some() && strategy != "None" && preserve {
        errs.push(invalid(
            "spec.conversion.strategy",
            &go_quote(strategy),
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    if let Some(conversion) = conversion {
        validate_conversion(errs, conversion, opts);
    }
}

/// `validateCustomResourceConversion` on the v1 form (`webhook.clientConfig` is the internal
/// `webhookClientConfig`).
fn validate_conversion(errs: &mut Vec<FieldError>, conversion: &Value, opts: &Options) {
    let strategy = text(conversion.get("strategy"));
    enum_string(
        errs,
        "spec.conversion.strategy",
        strategy,
        &["None", "Webhook"],
    );
    let webhook = conversion.get("webhook").filter(|w| !w.is_null());
    let client_config = webhook
        .and_then(|w| w.get("clientConfig"))
        .filter(|c| !c.is_null());
    let reviews = array(webhook.and_then(|w| w.get("conversionReviewVersions")));
    if strategy != "Webhook" {
        if client_config.is_some() {
            errs.push(forbidden(
                "spec.conversion.webhookClientConfig",
                "should not be set when strategy is not set to Webhook",
            ));
        }
        if !reviews.is_empty() {
            errs.push(forbidden(
                "spec.conversion.conversionReviewVersions",
                "should not be set when strategy is not set to Webhook",
            ));
        }
        return;
    }
    match client_config {
        None => errs.push(required(
            "spec.conversion.webhookClientConfig",
            "required when strategy is set to Webhook",
        )),
        Some(cc) => {
            let url = cc.get("url").filter(|u| !u.is_null());
            let service = cc.get("service").filter(|s| !s.is_null());
            match (url, service) {
                (Some(url), None) => validate_webhook_url(
                    errs,
                    url.as_str().unwrap_or(""),
                    "spec.conversion.webhookClientConfig.url",
                ),
                (None, Some(service)) => validate_webhook_service(
                    errs,
                    service,
                    "spec.conversion.webhookClientConfig.service",
                ),
                _ => errs.push(required(
                    "spec.conversion.webhookClientConfig",
                    "exactly one of url or service is required",
                )),
            }
            let bundle = text(cc.get("caBundle"));
            if !bundle.is_empty()
                && !opts.allow_invalid_ca_bundle
                && let Some(problem) = ca_bundle_error(bundle)
            {
                errs.push(invalid(
                    "spec.conversion.webhookClientConfig.caBundle",
                    &go_bytes(bundle),
                    &problem,
                ));
            }
        }
    }
    let path = "spec.conversion.conversionReviewVersions";
    if reviews.is_empty() {
        errs.push(required(path, ""));
        return;
    }
    let mut seen = HashSet::new();
    let mut recognized = false;
    for (i, v) in reviews.iter().enumerate() {
        let v = v.as_str().unwrap_or("");
        if !seen.insert(v) {
            errs.push(invalid(
                &format!("{path}[{i}]"),
                &go_quote(v),
                "duplicate version",
            ));
            continue;
        }
        for problem in dns1035_label_errors(v) {
            errs.push(invalid(&format!("{path}[{i}]"), &go_quote(v), &problem));
        }
        if matches!(v, "v1" | "v1beta1") {
            recognized = true;
        }
    }
    if opts.require_recognized_review_version && !recognized {
        errs.push(invalid(
            path,
            &go_string_slice(reviews),
            "must include at least one of v1, v1beta1",
        ));
    }
}

/// Why a `caBundle` (base64 of PEM) would not load as client-go's root certificates.
fn ca_bundle_error(bundle_b64: &str) -> Option<String> {
    use base64::Engine;
    let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(bundle_b64) else {
        return Some(
            "unable to load root certificates: unable to parse bytes as PEM block".to_owned(),
        );
    };
    if pem.is_empty() {
        return None;
    }
    let ok = x509_parser::pem::Pem::iter_from_buffer(&pem)
        .filter_map(Result::ok)
        .any(|p| p.label == "CERTIFICATE" && p.parse_x509().is_ok());
    if ok {
        None
    } else {
        Some("unable to load root certificates: unable to parse bytes as PEM block".to_owned())
    }
}

/// The parts of a URL `ValidateWebhookURL` looks at (Go's `url.Parse`, simplified).
struct UrlParts<'a> {
    scheme: &'a str,
    user: Option<&'a str>,
    host: &'a str,
    query: &'a str,
    fragment: &'a str,
}

fn parse_url(s: &str) -> UrlParts<'_> {
    let (rest, fragment) = s.split_once('#').unwrap_or((s, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (scheme, rest) = match rest.split_once(':') {
        Some((scheme, after))
            if scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            (scheme, after)
        }
        _ => ("", rest),
    };
    let (mut user, mut host) = (None, "");
    if let Some(authority) = rest.strip_prefix("//") {
        let end = authority.find('/').unwrap_or(authority.len());
        let authority = &authority[..end];
        match authority.rsplit_once('@') {
            Some((u, h)) => {
                user = Some(u);
                host = h;
            }
            None => host = authority,
        }
    }
    UrlParts {
        scheme,
        user,
        host,
        query,
        fragment,
    }
}

/// `webhook.ValidateWebhookURL` with `forceHttps`.
fn validate_webhook_url(errs: &mut Vec<FieldError>, url: &str, path: &str) {
    const FORM: &str = "; desired format: https://host[/path]";
    let u = parse_url(url);
    if u.scheme != "https" {
        errs.push(invalid(
            path,
            &go_quote(u.scheme),
            &format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    if u.host.is_empty() {
        errs.push(invalid(
            path,
            &go_quote(u.host),
            &format!("host must be specified{FORM}"),
        ));
    }
    if let Some(user) = u.user {
        errs.push(invalid(
            path,
            &go_quote(user),
            "user information is not permitted in the URL",
        ));
    }
    if !u.fragment.is_empty() {
        errs.push(invalid(
            path,
            &go_quote(u.fragment),
            "fragments are not permitted in the URL",
        ));
    }
    if !u.query.is_empty() {
        errs.push(invalid(
            path,
            &go_quote(u.query),
            "query parameters are not permitted in the URL",
        ));
    }
}

/// `webhook.ValidateWebhookService`.
fn validate_webhook_service(errs: &mut Vec<FieldError>, service: &Value, path: &str) {
    if text(service.get("name")).is_empty() {
        errs.push(required(
            &format!("{path}.name"),
            "service name is required",
        ));
    }
    if text(service.get("namespace")).is_empty() {
        errs.push(required(
            &format!("{path}.namespace"),
            "service namespace is required",
        ));
    }
    let port = service.get("port").and_then(Value::as_i64).unwrap_or(0);
    if !(1..=65535).contains(&port) {
        errs.push(invalid(
            &format!("{path}.port"),
            &port.to_string(),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(url_path) = service.get("path").and_then(Value::as_str) else {
        return;
    };
    if url_path.is_empty() || url_path == "/" {
        return;
    }
    let field = format!("{path}.path");
    if url_path == "//" {
        errs.push(invalid(
            &field,
            &go_quote(url_path),
            "segment[0] may not be empty",
        ));
        return;
    }
    if !url_path.starts_with('/') {
        errs.push(invalid(
            &field,
            &go_quote(url_path),
            "must start with a '/'",
        ));
    }
    let mut check = url_path.get(1..).unwrap_or("");
    check = check.strip_suffix('/').unwrap_or(check);
    for (i, step) in check.split('/').enumerate() {
        if step.is_empty() {
            errs.push(invalid(
                &field,
                &go_quote(url_path),
                &format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for problem in dns1123_subdomain_errors(step) {
            errs.push(invalid(
                &field,
                &go_quote(url_path),
                &format!("segment[{i}]: {problem}"),
            ));
        }
    }
}

/// `validateDeprecationWarning` for one version.
fn validate_deprecation(errs: &mut Vec<FieldError>, v: &Value, path: &str) {
    let warning = v.get("deprecationWarning").filter(|w| !w.is_null());
    let field = format!("{path}.deprecationWarning");
    let Some(warning) = warning else {
        return;
    };
    let w = warning.as_str().unwrap_or("");
    let value = go_quote(w);
    if !bool_at(v, "deprecated") {
        errs.push(invalid(
            &field,
            &value,
            "can only be set for deprecated versions",
        ));
        return;
    }
    if w.len() > 256 {
        errs.push(invalid(&field, &value, "must be <= 256 characters long"));
    }
    if w.is_empty() {
        errs.push(invalid(&field, &value, "must not be an empty string"));
    }
    for (i, c) in w.char_indices() {
        if c.is_control() {
            errs.push(invalid(
                &field,
                &value,
                &format!(
                    "must only contain printable UTF-8 characters; non-printable character found at index {i}"
                ),
            ));
            break;
        }
    }
}

/// The root-level checks of `validateCustomResourceDefinitionValidation` (the rest of the
/// schema is `crd::schema`'s): only `type: object` and the allowed fields at the root when
/// the status subresource is enabled, and no `nullable: true` at the root.
fn validate_root_schema(
    errs: &mut Vec<FieldError>,
    validation: &Value,
    status_enabled: bool,
    path: &str,
) {
    let Some(schema) = validation.get("openAPIV3Schema").and_then(Value::as_object) else {
        return;
    };
    if status_enabled {
        // Upstream walks the Go struct's fields in declaration order and stops at the first
        // offending one; `type` comes before the others.
        let set = |k: &str| schema.get(k).is_some_and(|v| !is_zero(v));
        if set("type") && text(schema.get("type")) != "object" {
            errs.push(invalid(
                &format!("{path}.openAPIV3Schema.type"),
                &go_quote(text(schema.get("type"))),
                "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
            ));
        } else if schema
            .keys()
            .any(|k| set(k) && !ROOT_FIELDS.contains(&k.as_str()))
        {
            errs.push(invalid(
                &format!("{path}.openAPIV3Schema"),
                "apiextensions.JSONSchemaProps{…}",
                &format!(
                    "only {ROOT_FIELDS_GO} fields are allowed at the root of the schema if the status subresource is enabled"
                ),
            ));
        }
    }
    if schema.get("nullable").and_then(Value::as_bool) == Some(true) {
        errs.push(forbidden(
            &format!("{path}.openAPIV3Schema.nullable"),
            "nullable cannot be true at the root",
        ));
    }
}

/// Go's zero value test on a decoded JSON field.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Number(_) => false,
    }
}

/// `ValidateCustomResourceDefinitionSubresources`.
fn validate_subresources(errs: &mut Vec<FieldError>, sub: &Value, path: &str) {
    let Some(scale) = sub.get("scale").filter(|s| !s.is_null()) else {
        return;
    };
    let check = |errs: &mut Vec<FieldError>, key: &str, prefix: &str, detail: &str| {
        let field = format!("{path}.scale.{key}");
        let p = text(scale.get(key));
        if p.is_empty() {
            errs.push(required(&field, ""));
        } else if let Some(e) = simple_json_path_error(p, &field) {
            errs.push(e);
        } else if !p.starts_with(prefix) {
            errs.push(invalid(&field, &go_quote(p), detail));
        }
    };
    check(
        errs,
        "specReplicasPath",
        ".spec.",
        "should be a json path under .spec",
    );
    check(
        errs,
        "statusReplicasPath",
        ".status.",
        "should be a json path under .status",
    );
    let selector = text(scale.get("labelSelectorPath"));
    if !selector.is_empty() {
        let field = format!("{path}.scale.labelSelectorPath");
        if let Some(e) = simple_json_path_error(selector, &field) {
            errs.push(e);
        } else if !selector.starts_with(".spec.") && !selector.starts_with(".status.") {
            errs.push(invalid(
                &field,
                &go_quote(selector),
                "should be a json path under either .spec or .status",
            ));
        }
    }
}

/// `validateSimpleJSONPath`.
fn simple_json_path_error(s: &str, path: &str) -> Option<FieldError> {
    if s.is_empty() {
        Some(invalid(path, "\"\"", "must not be empty"))
    } else if !s.starts_with('.') {
        Some(invalid(
            path,
            &go_quote(s),
            "must be a simple json path starting with .",
        ))
    } else {
        None
    }
}

/// `ValidateCustomResourceColumnDefinition` (note upstream's `JSONPath` path element).
fn validate_column(errs: &mut Vec<FieldError>, col: &Value, path: &str) {
    if text(col.get("name")).is_empty() {
        errs.push(required(&format!("{path}.name"), ""));
    }
    let types = format!("must be one of {}", COLUMN_TYPES.join(","));
    let kind = text(col.get("type"));
    if kind.is_empty() {
        errs.push(required(&format!("{path}.type"), &types));
    } else if !COLUMN_TYPES.contains(&kind) {
        errs.push(invalid(&format!("{path}.type"), &go_quote(kind), &types));
    }
    let format = text(col.get("format"));
    if !format.is_empty() && !COLUMN_FORMATS.contains(&format) {
        errs.push(invalid(
            &format!("{path}.format"),
            &go_quote(format),
            &format!("must be one of {}", COLUMN_FORMATS.join(",")),
        ));
    }
    let json_path = text(col.get("jsonPath"));
    let field = format!("{path}.JSONPath");
    if json_path.is_empty() {
        errs.push(required(&field, ""));
    } else if let Some(e) = simple_json_path_error(json_path, &field) {
        errs.push(e);
    }
}

/// `ValidateCustomResourceSelectableFields` against the version's schema JSON.
fn validate_selectable_fields(
    errs: &mut Vec<FieldError>,
    fields: &[Value],
    schema: &Value,
    path: &str,
) {
    let mut unique: BTreeSet<String> = BTreeSet::new();
    for (i, f) in fields.iter().enumerate() {
        let field = format!("{path}[{i}].jsonPath");
        let json_path = text(f.get("jsonPath"));
        if json_path.is_empty() {
            errs.push(required(&field, ""));
            continue;
        }
        let (steps, found) = match resolve_field_path(json_path, schema) {
            Ok(r) => r,
            Err(e) => {
                errs.push(invalid(
                    &field,
                    &go_quote(json_path),
                    &format!("is an invalid path: {e}"),
                ));
                continue;
            }
        };
        if steps.first().map(String::as_str) == Some("metadata") {
            errs.push(invalid(
                &field,
                &go_quote(json_path),
                "must not point to fields in metadata",
            ));
        }
        let allowed =
            found.is_some_and(|s| matches!(text(s.get("type")), "string" | "boolean" | "integer"));
        if !allowed {
            errs.push(invalid(
                &field,
                &go_quote(json_path),
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        let key = steps.join(".");
        if !unique.insert(key) {
            errs.push(FieldError {
                reason: "FieldValueDuplicate",
                field,
                message: format!("Duplicate value: {}", go_quote(json_path)),
            });
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        errs.push(FieldError {
            reason: "FieldValueTooMany",
            field: path.to_owned(),
            message: format!(
                "Too many: {}: must have at most {MAX_SELECTABLE_FIELDS} items",
                unique.len()
            ),
        });
    }
}

/// Upstream's `cel.ValidFieldPath` without array notation: `.a.b` through `properties` (or
/// `additionalProperties` keys); the path's elements and the schema found (`None` when the
/// last step went through `additionalProperties: true`).
fn resolve_field_path<'s>(
    json_path: &str,
    schema: &'s Value,
) -> Result<(Vec<String>, Option<&'s Value>), String> {
    let mut tokens: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, c) in json_path.char_indices() {
        if matches!(c, '.' | '[' | ']') {
            if i > start {
                tokens.push(&json_path[start..i]);
            }
            tokens.push(&json_path[i..i + 1]);
            start = i + 1;
        }
    }
    if start < json_path.len() {
        tokens.push(&json_path[start..]);
    }
    let mut steps = Vec::new();
    let mut current = Some(schema);
    let mut it = tokens.into_iter();
    while let Some(tok) = it.next() {
        match tok {
            "[" => return Err("array notation is not allowed".to_owned()),
            "." => {
                let Some(name) = it.next() else {
                    return Err("unexpected end of JSON path".to_owned());
                };
                let s = current.ok_or("does not refer to a valid field")?;
                if let Some(props) = s.get("properties").and_then(Value::as_object) {
                    current = Some(props.get(name).ok_or("does not refer to a valid field")?);
                } else if let Some(ap) = s.get("additionalProperties").filter(|a| !a.is_null()) {
                    current = ap.as_object().map(|_| ap);
                } else {
                    return Err("does not refer to a valid field".to_owned());
                }
                steps.push(name.to_owned());
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        }
    }
    Ok((steps, current))
}

/// `ValidateCustomResourceDefinitionNames`.
fn validate_names(errs: &mut Vec<FieldError>, names: &Value, path: &str) {
    let label = |errs: &mut Vec<FieldError>, key: &str, value: &str| {
        let problems = dns1035_label_errors(value);
        if !value.is_empty() && !problems.is_empty() {
            errs.push(invalid(
                &format!("{path}.{key}"),
                &go_quote(value),
                &problems.join(","),
            ));
        }
    };
    let mixed = |errs: &mut Vec<FieldError>, key: &str, value: &str| {
        let problems = dns1035_label_errors(&value.to_lowercase());
        if !value.is_empty() && !problems.is_empty() {
            errs.push(invalid(
                &format!("{path}.{key}"),
                &go_quote(value),
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    problems.join(",")
                ),
            ));
        }
    };
    label(errs, "plural", text(names.get("plural")));
    label(errs, "singular", text(names.get("singular")));
    let kind = text(names.get("kind"));
    let list_kind = text(names.get("listKind"));
    mixed(errs, "kind", kind);
    mixed(errs, "listKind", list_kind);
    for (i, s) in array(names.get("shortNames")).iter().enumerate() {
        let s = s.as_str().unwrap_or("");
        let problems = dns1035_label_errors(s);
        if !problems.is_empty() {
            errs.push(invalid(
                &format!("{path}.shortNames[{i}]"),
                &go_quote(s),
                &problems.join(","),
            ));
        }
    }
    if !kind.is_empty() && kind == list_kind {
        errs.push(invalid(
            &format!("{path}.listKind"),
            &go_quote(list_kind),
            "kind and listKind may not be the same",
        ));
    }
    for (i, c) in array(names.get("categories")).iter().enumerate() {
        let c = c.as_str().unwrap_or("");
        let problems = dns1035_label_errors(c);
        if !problems.is_empty() {
            errs.push(invalid(
                &format!("{path}.categories[{i}]"),
                &go_quote(c),
                &problems.join(","),
            ));
        }
    }
}

/// `ValidateCustomResourceDefinitionStoredVersions`.
fn validate_stored_versions(errs: &mut Vec<FieldError>, crd: &Value) {
    let path = "status.storedVersions";
    let stored = array(crd.pointer("/status/storedVersions"));
    if stored.is_empty() {
        errs.push(invalid(
            path,
            &go_string_slice(stored),
            "must have at least one stored version",
        ));
        return;
    }
    let mut remaining: HashMap<&str, usize> = HashMap::new();
    for (i, v) in stored.iter().enumerate() {
        remaining.insert(v.as_str().unwrap_or(""), i);
    }
    for v in array(crd.pointer("/spec/versions")) {
        let name = text(v.get("name"));
        let present = remaining.contains_key(name);
        if bool_at(v, "storage") && !present {
            errs.push(invalid(
                path,
                &go_string_slice(stored),
                &format!("must have the storage version {name}"),
            ));
        }
        remaining.remove(name);
    }
    let mut missing: Vec<(&str, usize)> = remaining.into_iter().collect();
    missing.sort_by_key(|(_, i)| *i);
    for (v, i) in missing {
        errs.push(invalid(
            &format!("{path}[{i}]"),
            &go_quote(v),
            &format!(
                "missing from spec.versions; {v} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {v} and removes {v} from status.storedVersions"
            ),
        ));
    }
}

/// The API approval state of the `api-approved.kubernetes.io` annotation and its reason.
#[derive(Debug, PartialEq, Eq)]
enum Approval {
    Invalid,
    Approved,
    Bypassed,
    Missing,
}

fn approval_state(crd: &Value) -> (Approval, String, String) {
    let annotation = text(
        crd.pointer("/metadata/annotations")
            .and_then(|a| a.get(API_APPROVED)),
    )
    .to_owned();
    let u = parse_url(&annotation);
    let (state, reason) = if annotation.is_empty() {
        (
            Approval::Missing,
            format!(
                "protected groups must have approval annotation \"{API_APPROVED}\", see https://github.com/kubernetes/enhancements/pull/1111"
            ),
        )
    } else if annotation.starts_with("unapproved") {
        (Approval::Bypassed, format!("not approved: {annotation:?}"))
    } else if !u.scheme.is_empty() && !u.host.is_empty() {
        (Approval::Approved, format!("approved in {annotation}"))
    } else {
        (
            Approval::Invalid,
            format!(
                "protected groups must have approval annotation \"{API_APPROVED}\" with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111"
            ),
        )
    };
    (state, reason, annotation)
}

/// `validateAPIApproval`: CRDs of `k8s.io`/`kubernetes.io` groups need the approval annotation.
fn validate_api_approval(errs: &mut Vec<FieldError>, crd: &Value, old: Option<&Value>) {
    let group = text(crd.pointer("/spec/group"));
    let protected = group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io");
    if !protected {
        return;
    }
    let (state, reason, annotation) = approval_state(crd);
    if let Some(old) = old
        && approval_state(old).0 == state
    {
        return;
    }
    let field = format!("metadata.annotations[{API_APPROVED}]");
    match state {
        Approval::Approved | Approval::Bypassed => {}
        Approval::Missing => errs.push(required(&field, &reason)),
        Approval::Invalid => errs.push(invalid(&field, &go_quote(&annotation), &reason)),
    }
}

// ---- helpers ----

fn text(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn bool_at(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn preserve_unknown_fields(crd: &Value) -> bool {
    crd.pointer("/spec/preserveUnknownFields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn storage_version(crd: &Value) -> Option<&str> {
    array(crd.pointer("/spec/versions"))
        .iter()
        .find(|v| bool_at(v, "storage"))
        .map(|v| text(v.get("name")))
}

/// Whether every version has the same `key` (absent and `null` equal; for lists, also empty).
fn identical(versions: &[Value], key: &str, list: bool) -> bool {
    let norm = |v: &Value| -> Value {
        match v.get(key) {
            None | Some(Value::Null) if list => json!([]),
            None => Value::Null,
            Some(x) => x.clone(),
        }
    };
    let Some(first) = versions.first().map(norm) else {
        return false;
    };
    versions.iter().all(|v| norm(v) == first)
}

/// Whether a schema (or any schema inside it) has a `default`.
fn schema_has_default(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => {
            if m.get("default").is_some_and(|d| !d.is_null()) {
                return true;
            }
            let children = [
                "properties",
                "patternProperties",
                "definitions",
                "dependencies",
            ];
            children.iter().any(|k| {
                m.get(*k)
                    .and_then(Value::as_object)
                    .is_some_and(|props| props.values().any(schema_has_default))
            }) || ["items", "additionalProperties", "additionalItems", "not"]
                .iter()
                .any(|k| m.get(*k).is_some_and(schema_has_default))
                || ["allOf", "anyOf", "oneOf"]
                    .iter()
                    .any(|k| array(m.get(*k)).iter().any(schema_has_default))
        }
        Value::Array(items) => items.iter().any(schema_has_default),
        _ => false,
    }
}

/// `validateEnumStrings`: required, and one of `accepted`.
fn enum_string(errs: &mut Vec<FieldError>, path: &str, value: &str, accepted: &[&str]) {
    if value.is_empty() {
        errs.push(required(path, ""));
    } else if !accepted.contains(&value) {
        let quoted: Vec<String> = accepted.iter().map(|a| go_quote(a)).collect();
        errs.push(FieldError {
            reason: "FieldValueNotSupported",
            field: path.to_owned(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_quote(value),
                quoted.join(", ")
            ),
        });
    }
}

/// `ValidateImmutableField` on a string field.
fn immutable(errs: &mut Vec<FieldError>, new: &Value, old: &Value, key: &str, path: &str) {
    let (n, o) = (text(new.get(key)), text(old.get(key)));
    if n != o {
        errs.push(invalid(path, &go_quote(n), "field is immutable"));
    }
}

fn with_detail(mut s: String, detail: &str) -> String {
    if !detail.is_empty() {
        s.push_str(": ");
        s.push_str(detail);
    }
    s
}

/// `field.Required`.
fn required(path: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueRequired",
        field: path.to_owned(),
        message: with_detail("Required value".into(), detail),
    }
}

/// `field.Invalid` with an already formatted value.
fn invalid(path: &str, value: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: path.to_owned(),
        message: with_detail(format!("Invalid value: {value}"), detail),
    }
}

/// `field.Forbidden`.
fn forbidden(path: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueForbidden",
        field: path.to_owned(),
        message: with_detail("Forbidden".into(), detail),
    }
}

/// Go's `%q`.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%#v` of a `[]string` (`[]string(nil)` when empty, as a missing list decodes).
fn go_string_slice(items: &[Value]) -> String {
    if items.is_empty() {
        return "[]string(nil)".to_owned();
    }
    let quoted: Vec<String> = items
        .iter()
        .map(|v| go_quote(v.as_str().unwrap_or("")))
        .collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Go's `%#v` of a `[]byte` (a decoded base64 field).
fn go_bytes(b64: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap_or_default();
    let parts: Vec<String> = bytes.iter().map(|b| format!("0x{b:x}")).collect();
    format!("[]byte{{{}}}", parts.join(", "))
}

/// Go's `%#v` of the internal `[]CustomResourceDefinitionVersion` (fields moved to the top
/// level per `hoisted` are nil; pointers print as an address, shown as a fixed placeholder).
fn go_versions(versions: &[Value], hoisted: [bool; 4]) -> String {
    const ADDR: &str = "0xc000000000";
    let ptr = |v: &Value, key: &str, ty: &str, hoisted: bool| {
        if hoisted || v.get(key).is_none_or(Value::is_null) {
            format!("(*{ty})(nil)")
        } else {
            format!("(*{ty})({ADDR})")
        }
    };
    let items: Vec<String> = versions
        .iter()
        .map(|v| {
            let columns = if hoisted[2] {
                "[]apiextensions.CustomResourceColumnDefinition(nil)".to_owned()
            } else {
                go_columns(array(v.get("additionalPrinterColumns")))
            };
            let selectable = if hoisted[3] || array(v.get("selectableFields")).is_empty() {
                "[]apiextensions.SelectableField(nil)".to_owned()
            } else {
                let fs: Vec<String> = array(v.get("selectableFields"))
                    .iter()
                    .map(|f| {
                        format!(
                            "apiextensions.SelectableField{{JSONPath:{}}}",
                            go_quote(text(f.get("jsonPath")))
                        )
                    })
                    .collect();
                format!("[]apiextensions.SelectableField{{{}}}", fs.join(", "))
            };
            format!(
                "apiextensions.CustomResourceDefinitionVersion{{Name:{}, Served:{}, Storage:{}, Deprecated:{}, DeprecationWarning:{}, Schema:{}, Subresources:{}, AdditionalPrinterColumns:{columns}, SelectableFields:{selectable}}}",
                go_quote(text(v.get("name"))),
                bool_at(v, "served"),
                bool_at(v, "storage"),
                bool_at(v, "deprecated"),
                ptr(v, "deprecationWarning", "string", false),
                ptr(v, "schema", "apiextensions.CustomResourceValidation", hoisted[0]),
                ptr(v, "subresources", "apiextensions.CustomResourceSubresources", hoisted[1]),
            )
        })
        .collect();
    if items.is_empty() {
        return "[]apiextensions.CustomResourceDefinitionVersion(nil)".to_owned();
    }
    format!(
        "[]apiextensions.CustomResourceDefinitionVersion{{{}}}",
        items.join(", ")
    )
}

fn go_columns(cols: &[Value]) -> String {
    if cols.is_empty() {
        return "[]apiextensions.CustomResourceColumnDefinition(nil)".to_owned();
    }
    let items: Vec<String> = cols
        .iter()
        .map(|c| {
            format!(
                "apiextensions.CustomResourceColumnDefinition{{Name:{}, Type:{}, Format:{}, Description:{}, Priority:{}, JSONPath:{}}}",
                go_quote(text(c.get("name"))),
                go_quote(text(c.get("type"))),
                go_quote(text(c.get("format"))),
                go_quote(text(c.get("description"))),
                c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                go_quote(text(c.get("jsonPath"))),
            )
        })
        .collect();
    format!(
        "[]apiextensions.CustomResourceColumnDefinition{{{}}}",
        items.join(", ")
    )
}

/// `regexError` of apimachinery's `validation` package.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

/// Whether `s` matches `[a-z]([-a-z0-9]*[a-z0-9])?` (`first_digit`: `[a-z0-9]` first).
fn is_label(s: &str, first_digit: bool) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    (first.is_ascii_lowercase() || (first_digit && first.is_ascii_digit()))
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// `IsDNS1035Label`.
fn dns1035_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is_label(s, false) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `IsDNS1123Subdomain`.
fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if !s.split('.').all(|part| is_label(part, true)) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["example.com"],
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid, defaulted, status-prepared CRD.
    fn widget() -> Value {
        let mut crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"],
                          "categories": ["all"]},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer"},
                            "color": {"type": "string"},
                            "labels": {"type": "object",
                                       "additionalProperties": {"type": "string"}},
                            "items": {"type": "array", "items": {"type": "string"}},
                        }},
                        "status": {"type": "object", "properties": {
                            "replicas": {"type": "integer"}}},
                    }}},
                    "subresources": {"status": {}, "scale": {
                        "specReplicasPath": ".spec.size",
                        "statusReplicasPath": ".status.replicas"}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                }],
            },
        });
        default_crd(&mut crd);
        crd
    }

    /// `field: message` of every error.
    fn errors(crd: &Value, old: Option<&Value>) -> Vec<String> {
        validate_crd(crd, old)
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn defaulting_is_upstream_s() {
        let crd = widget();
        assert_eq!(crd["spec"]["names"]["singular"], "widget");
        assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(crd["spec"]["conversion"], json!({"strategy": "None"}));
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        let mut hook = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
            "clientConfig": {"service": {"name": "s", "namespace": "n"}}}}}});
        default_crd(&mut hook);
        assert_eq!(
            hook["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
            443
        );
    }

    #[test]
    fn a_valid_crd_has_no_errors() {
        assert_eq!(errors(&widget(), None), Vec::<String>::new());
        assert_eq!(errors(&widget(), Some(&widget())), Vec::<String>::new());
    }

    #[test]
    fn single_errors_with_upstream_paths_and_messages() {
        type Edit = fn(&mut Value);
        let cases: &[(Edit, &str)] = &[
            (
                |c| c["metadata"]["name"] = json!("widget.example.com"),
                "metadata.name: Invalid value: \"widget.example.com\": must be spec.names.plural+\".\"+spec.group",
            ),
            (
                |c| {
                    c["spec"]["group"] = json!("example");
                    c["metadata"]["name"] = json!("widgets.example");
                },
                "spec.group: Invalid value: \"example\": should be a domain with at least one dot",
            ),
            (
                |c| c["spec"]["scope"] = json!("Global"),
                "spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\"",
            ),
            (
                |c| c["spec"]["names"]["shortNames"] = json!(["W"]),
                "spec.names.shortNames[0]: Invalid value: \"W\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            ),
            (
                |c| c["spec"]["names"]["kind"] = json!("Widget_"),
                "spec.names.kind: Invalid value: \"Widget_\": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            ),
            (
                |c| c["spec"]["names"]["listKind"] = json!("Widget"),
                "spec.names.listKind: Invalid value: \"Widget\": kind and listKind may not be the same",
            ),
            (
                |c| c["spec"]["versions"][0]["schema"] = Value::Null,
                "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] =
                        json!(".status.size")
                },
                "spec.subresources.scale.specReplicasPath: Invalid value: \".status.size\": should be a json path under .spec",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["subresources"]["scale"]["statusReplicasPath"] =
                        json!("status.replicas")
                },
                "spec.subresources.scale.statusReplicasPath: Invalid value: \"status.replicas\": must be a simple json path starting with .",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["subresources"]["scale"]["labelSelectorPath"] =
                        json!(".metadata.labels")
                },
                "spec.subresources.scale.labelSelectorPath: Invalid value: \".metadata.labels\": should be a json path under either .spec or .status",
            ),
            (
                |c| c["spec"]["versions"][0]["additionalPrinterColumns"][0]["type"] = json!("int"),
                "spec.additionalPrinterColumns[0].type: Invalid value: \"int\": must be one of boolean,date,integer,number,string",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["additionalPrinterColumns"][0]["format"] =
                        json!("uuid")
                },
                "spec.additionalPrinterColumns[0].format: Invalid value: \"uuid\": must be one of byte,date,date-time,double,float,int32,int64,password",
            ),
            (
                |c| c["spec"]["versions"][0]["additionalPrinterColumns"][0]["jsonPath"] = json!(""),
                "spec.additionalPrinterColumns[0].JSONPath: Required value",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["selectableFields"] =
                        json!([{"jsonPath": ".spec.labels"}])
                },
                "spec.selectableFields[0].jsonPath: Invalid value: \".spec.labels\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["selectableFields"] =
                        json!([{"jsonPath": ".spec.nope"}])
                },
                "spec.selectableFields[0].jsonPath: Invalid value: \".spec.nope\": is an invalid path: does not refer to a valid field",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["selectableFields"] =
                        json!([{"jsonPath": ".spec.items[0]"}])
                },
                "spec.selectableFields[0].jsonPath: Invalid value: \".spec.items[0]\": is an invalid path: array notation is not allowed",
            ),
            (
                |c| {
                    c["spec"]["versions"][0]["subresources"] = Value::Null;
                    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["nullable"] = json!(true);
                },
                "spec.validation.openAPIV3Schema.nullable: Forbidden: nullable cannot be true at the root",
            ),
            (
                |c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["type"] = json!("array"),
                "spec.validation.openAPIV3Schema.type: Invalid value: \"array\": only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
            ),
            (
                |c| {
                    c["spec"]["conversion"] = json!({"strategy": "Webhook",
                        "webhook": {"conversionReviewVersions": ["v1"]}})
                },
                "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
            ),
            (
                |c| c["spec"]["versions"][0]["deprecationWarning"] = json!("old"),
                "spec.versions[0].deprecationWarning: Invalid value: \"old\": can only be set for deprecated versions",
            ),
            (
                |c| c["spec"]["preserveUnknownFields"] = json!(true),
                "spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
            ),
        ];
        for (edit, want) in cases {
            let mut crd = widget();
            edit(&mut crd);
            let got = errors(&crd, None);
            assert_eq!(got, vec![want.to_string()], "want {want}");
        }
    }

    #[test]
    fn versions_need_exactly_one_storage_version() {
        let mut crd = widget();
        let v1 = crd["spec"]["versions"][0].clone();
        let mut v2 = v1.clone();
        v2["name"] = json!("v2");
        crd["spec"]["versions"] = json!([v1, v2]);
        let got = errors(&crd, None);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            got[1],
            "status.storedVersions: Invalid value: []string{\"v1\"}: must have the storage version v2"
        );
        assert!(got[0].starts_with("spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{apiextensions.CustomResourceDefinitionVersion{Name:\"v1\", Served:true, Storage:true"));
        assert!(got[0].ends_with(": must have exactly one version marked as storage version"));

        crd["spec"]["versions"][1]["name"] = json!("v1");
        crd["spec"]["versions"][1]["storage"] = json!(false);
        let got = errors(&crd, None);
        assert_eq!(got.len(), 1);
        assert!(got[0].ends_with(": must contain unique version names"));

        crd["spec"]["versions"][1]["name"] = json!("V2");
        let got = errors(&crd, None);
        assert_eq!(
            got[0],
            "spec.versions[1].name: Invalid value: \"V2\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        );
    }

    #[test]
    fn differing_versions_report_per_version_paths() {
        let mut crd = widget();
        let mut v2 = crd["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        v2["additionalPrinterColumns"] = json!([{"name": "X", "type": "bad", "jsonPath": ".x"}]);
        crd["spec"]["versions"].as_array_mut().unwrap().push(v2);
        assert_eq!(
            errors(&crd, None),
            vec![
                "spec.versions[1].additionalPrinterColumns[0].type: Invalid value: \"bad\": must be one of boolean,date,integer,number,string"
            ]
        );
        assert_eq!(schema_path(&crd, 1), "spec.validation.openAPIV3Schema");
        crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["description"] = json!("v2");
        assert_eq!(
            schema_path(&crd, 1),
            "spec.versions[1].schema.openAPIV3Schema"
        );
    }

    #[test]
    fn webhook_conversion() {
        let mut crd = widget();
        crd["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "http://conv.example.com/convert?x=1"},
            "conversionReviewVersions": ["v2"]}});
        assert_eq!(
            errors(&crd, None),
            vec![
                "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "spec.conversion.webhookClientConfig.url: Invalid value: \"x=1\": query parameters are not permitted in the URL",
                "spec.conversion.conversionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1",
            ]
        );
        crd["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"service": {"name": "conv", "namespace": "ns", "port": 443,
                                         "path": "/convert"}},
            "conversionReviewVersions": ["v1"]}});
        assert_eq!(errors(&crd, None), Vec::<String>::new());
        crd["spec"]["conversion"] = json!({"strategy": "None", "webhook": {
            "conversionReviewVersions": ["v1"]}});
        assert_eq!(
            errors(&crd, None),
            vec![
                "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook"
            ]
        );
    }

    #[test]
    fn updates_keep_group_plural_and_established_scope_and_kind() {
        let mut old = widget();
        old["status"]["conditions"] = json!([{"type": "Established", "status": "True"}]);
        let mut new = old.clone();
        new["spec"]["scope"] = json!("Cluster");
        new["spec"]["names"]["kind"] = json!("Gadget");
        new["spec"]["names"]["listKind"] = json!("GadgetList");
        assert_eq!(
            errors(&new, Some(&old)),
            vec![
                "spec.scope: Invalid value: \"Cluster\": field is immutable",
                "spec.names.kind: Invalid value: \"Gadget\": field is immutable",
            ]
        );
        let mut new = widget();
        new["spec"]["group"] = json!("example.org");
        new["metadata"]["name"] = json!("widgets.example.org");
        assert_eq!(
            errors(&new, Some(&widget())),
            vec!["spec.group: Invalid value: \"example.org\": field is immutable"]
        );
    }

    #[test]
    fn stored_versions_must_stay_in_spec() {
        let mut crd = widget();
        crd["status"]["storedVersions"] = json!(["v1beta1", "v1"]);
        assert_eq!(
            errors(&crd, None),
            vec![
                "status.storedVersions[0]: Invalid value: \"v1beta1\": missing from spec.versions; v1beta1 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v1beta1 and removes v1beta1 from status.storedVersions"
            ]
        );
        crd["status"]["storedVersions"] = json!(["v1"]);
        crd["spec"]["versions"][0]["name"] = json!("v2");
        let got = errors(&crd, None);
        assert!(got.contains(&"status.storedVersions: Invalid value: []string{\"v1\"}: must have the storage version v2".to_owned()), "{got:?}");
    }

    #[test]
    fn protected_groups_need_approval() {
        let mut crd = widget();
        crd["spec"]["group"] = json!("widgets.k8s.io");
        crd["metadata"]["name"] = json!("widgets.widgets.k8s.io");
        assert_eq!(
            errors(&crd, None),
            vec![
                "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111"
            ]
        );
        crd["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/1"});
        assert_eq!(errors(&crd, None), Vec::<String>::new());
        crd["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "yes"});
        assert_eq!(errors(&crd, None).len(), 1);
    }

    #[test]
    fn missing_names_are_required() {
        let mut crd = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]},
        });
        default_crd(&mut crd);
        assert_eq!(
            errors(&crd, None),
            vec![
                "spec.names.singular: Required value",
                "spec.names.kind: Required value",
                "spec.names.listKind: Required value",
            ]
        );
    }
}
