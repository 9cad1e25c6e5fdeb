//! [`RequestInfo`]: what a request is about, parsed once from method, path and query
//! (upstream's `RequestInfoFactory`). Authorization and the handlers read it.

use http::Method;

/// The parsed meaning of a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// Whether the path names an API resource (`/api/...`, `/apis/...` with a resource).
    pub is_resource: bool,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection;
    /// for non-resource paths the lower-case HTTP method.
    pub verb: String,
    /// `api` or `apis` (empty for non-resource paths).
    pub api_prefix: String,
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Namespace, if the path is namespaced.
    pub namespace: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource (`status`, `scale`, …).
    pub subresource: String,
    /// Object name.
    pub name: String,
    /// The raw path.
    pub path: String,
    /// The `fieldSelector` query parameter, percent-decoded (empty when absent): upstream's
    /// authorizers see it (the node authorizer lets a node list only its own pods).
    pub field_selector: String,
}

/// Subresources of namespaces that are not namespaced resources of their own.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True" | "watch"))
    })
}

impl RequestInfo {
    /// Parses a request line.
    pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let mut info = RequestInfo {
            verb: method.as_str().to_ascii_lowercase(),
            path: path.to_owned(),
            field_selector: query
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("fieldSelector="))
                .map(crate::handlers::decode_component)
                .unwrap_or_default(),
            ..Default::default()
        };
        let parts: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        let rest = match parts.as_slice() {
            ["api", version, rest @ ..] => {
                info.api_prefix = "api".into();
                info.version = (*version).into();
                rest
            }
            ["apis", group] => {
                info.api_prefix = "apis".into();
                info.group = (*group).into();
                return info;
            }
            ["apis", group, version, rest @ ..] => {
                info.api_prefix = "apis".into();
                info.group = (*group).into();
                info.version = (*version).into();
                rest
            }
            _ => return info,
        };
        if rest.is_empty() {
            return info;
        }
        let mut rest: &[&str] = rest;
        if rest[0] == "namespaces" && rest.len() > 1 {
            info.namespace = rest[1].into();
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
            }
        }
        info.is_resource = true;
        info.resource = rest[0].into();
        if let Some(name) = rest.get(1) {
            info.name = (*name).into();
        }
        if let Some(sub) = rest.get(2) {
            info.subresource = (*sub).into();
        }
        if info.resource == "namespaces" && rest.len() >= 2 {
            // /api/v1/namespaces/<name>[/status]: the namespace object itself.
            info.namespace.clear();
        }
        info.verb = match *method {
            Method::GET | Method::HEAD if is_watch(query) => "watch",
            Method::GET | Method::HEAD if info.name.is_empty() => "list",
            Method::GET | Method::HEAD => "get",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if info.name.is_empty() => "deletecollection",
            Method::DELETE => "delete",
            _ => "unknown",
        }
        .into();
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_object_path() {
        let i = RequestInfo::parse(
            &Method::GET,
            "/apis/apps/v1/namespaces/default/deployments/web",
            None,
        );
        assert_eq!(
            (
                i.group.as_str(),
                i.namespace.as_str(),
                i.resource.as_str(),
                i.name.as_str(),
                i.verb.as_str()
            ),
            ("apps", "default", "deployments", "web", "get")
        );
    }

    #[test]
    fn namespace_status_is_a_subresource_of_the_namespace() {
        let i = RequestInfo::parse(&Method::PUT, "/api/v1/namespaces/x/status", None);
        assert_eq!(
            (i.resource.as_str(), i.name.as_str(), i.subresource.as_str()),
            ("namespaces", "x", "status")
        );
        assert_eq!(i.namespace, "");
    }

    #[test]
    fn collection_verbs() {
        let list = RequestInfo::parse(&Method::GET, "/api/v1/pods", Some("limit=500"));
        assert_eq!(list.verb, "list");
        let watch = RequestInfo::parse(
            &Method::GET,
            "/api/v1/namespaces/d/pods",
            Some("watch=true&x=1"),
        );
        assert_eq!(watch.verb, "watch");
        let dc = RequestInfo::parse(&Method::DELETE, "/api/v1/namespaces/d/pods", None);
        assert_eq!(dc.verb, "deletecollection");
    }

    #[test]
    fn non_resource_paths() {
        let i = RequestInfo::parse(&Method::GET, "/healthz", None);
        assert!(!i.is_resource);
        assert_eq!(i.verb, "get");
        assert!(!RequestInfo::parse(&Method::GET, "/apis/apps/v1", None).is_resource);
    }
}
