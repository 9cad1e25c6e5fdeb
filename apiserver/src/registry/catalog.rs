//! The static catalog of built-in REST resources: every resource kube-apiserver v1.33 serves with
//! its default settings, described exactly as its discovery documents report it.
//!
//! What is in it: every GA group/version of v1.33 (beta APIs have been off by default since
//! v1.24, and v1.33 turns none on), including `apiregistration.k8s.io/v1` (`APIService`,
//! served by the aggregator inside kube-apiserver) and `apiextensions.k8s.io/v1`
//! (`CustomResourceDefinition`). Left out, because v1.33 does not serve them unless asked to:
//! `resource.k8s.io` (v1beta1, v1beta2, v1alpha3), `storage.k8s.io/v1beta1`
//! `VolumeAttributesClass`, `certificates.k8s.io/v1beta1` `ClusterTrustBundle`,
//! `coordination.k8s.io/v1beta1` `LeaseCandidate`, `networking.k8s.io/v1beta1`,
//! `admissionregistration.k8s.io/v1beta1` and every alpha version.
//!
//! Order is discovery's order. Groups come as `/api` then `/apis` lists them (by the
//! aggregator's group priority: `apiregistration.k8s.io`, `apps`, `events.k8s.io`, …,
//! `flowcontrol.apiserver.k8s.io`); within a group the preferred version comes first
//! (`autoscaling/v2` before `autoscaling/v1`); within a version resources are sorted by plural,
//! and each resource's subresources by name, as the API installer sorts them.
//!
//! Response kinds: [`SubresourceInfo`] always carries the full group, version and kind of what
//! the subresource returns. Upstream's documents print less: the aggregated (v2) document writes
//! `responseKind: {group: "", version: "", kind}` whenever the kind is in the resource's own
//! group/version, and the legacy `APIResourceList` writes `group`/`version` on a `pods/eviction`
//! style entry only when they differ from the list's group/version. The discovery handlers do
//! that blanking; the catalog keeps the facts.
//!
//! Sources checked: kubernetes/kubernetes `api/discovery/*.json` (the generated discovery
//! fixtures), `pkg/registry/core/rest/storage_core.go` (`pods/resize` is registered when the
//! `InPlacePodVerticalScaling` gate is on — beta and on by default in v1.33), and published
//! `/api/v1` and `kubectl api-resources` output from clusters of this vintage (GA
//! `ipaddresses`/`servicecidrs` and `pods/resize`, no `resource.k8s.io/v1`). The unit tests
//! below tie every entry to the matching k8s-openapi (`v1_33`) type.

/// One subresource of a resource, e.g. `deployments/scale` or `pods/log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubresourceInfo {
    /// The subresource's name, the path segment after the object's name: `status`, `scale`,
    /// `binding`, `eviction`, `token`, `log`, `exec`, `attach`, `portforward`, `proxy`,
    /// `approval`, `ephemeralcontainers`, `resize`, `finalize`.
    pub name: &'static str,
    /// Group of the subresource's response kind (`""` for core), e.g. `autoscaling` for `scale`.
    pub group: &'static str,
    /// Version of the subresource's response kind, e.g. `v1` for `autoscaling/v1` `Scale`.
    pub version: &'static str,
    /// The subresource's response kind: the parent's kind for `status`, `Scale` for `scale`,
    /// `Binding`, `Eviction`, `TokenRequest`, `PodExecOptions`, …
    pub kind: &'static str,
    /// The verbs discovery lists for the subresource, in upstream's (sorted) order.
    pub verbs: &'static [&'static str],
}

/// One resource as discovery reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; `""` for the core group served under `/api`.
    pub group: &'static str,
    /// API version, e.g. `v1`, `v2`.
    pub version: &'static str,
    /// The kind of the resource's objects, e.g. `Deployment`.
    pub kind: &'static str,
    /// Plural resource name, the URL path segment, e.g. `deployments`.
    pub plural: &'static str,
    /// Singular resource name (`singularName` / `singularResource`), e.g. `deployment`.
    pub singular: &'static str,
    /// Whether objects live in namespaces (`scope: Namespaced`) or not (`scope: Cluster`).
    pub namespaced: bool,
    /// The resource's verbs in upstream's discovery order, e.g.
    /// `["create","delete","deletecollection","get","list","patch","update","watch"]`.
    pub verbs: &'static [&'static str],
    /// Short names kubectl accepts, e.g. `["deploy"]`.
    pub short_names: &'static [&'static str],
    /// Categories, e.g. `["all"]` (what `kubectl get all` expands to) or `["api-extensions"]`.
    pub categories: &'static [&'static str],
    /// Subresources, sorted by name.
    pub subresources: &'static [SubresourceInfo],
    /// How objects of this resource are kept.
    pub kind_class: KindClass,
}

impl ResourceInfo {
    /// The subresource called `name` (e.g. `"status"`), if the resource has one.
    pub fn subresource(&self, name: &str) -> Option<&'static SubresourceInfo> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// Whether discovery lists `verb` for the resource itself.
    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }
}

/// How the object is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindClass {
    /// An ordinary stored object (CRUD + list/watch through storage).
    Stored,
    /// Create-only, never stored (SubjectAccessReview, SelfSubjectAccessReview,
    /// LocalSubjectAccessReview, SelfSubjectRulesReview, TokenReview, SelfSubjectReview).
    Review,
    /// Served by other means (e.g. componentstatuses: read-only computed; bindings in core/v1 —
    /// the legacy `bindings` resource).
    Virtual,
    /// A custom resource (a served version of an established CRD): stored like
    /// [`KindClass::Stored`], at the CRD's storage version.
    Custom {
        /// The version objects are stored at (`spec.versions[].storage`).
        storage_version: &'static str,
    },
}

// Verb lists, each in the order discovery prints them (the installer sorts them).

/// Everything a stored resource supports.
const CRUD: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// Namespaces: no `deletecollection`.
const CRUD_NO_DELETECOLLECTION: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
/// Reviews, bindings, evictions, token requests.
const CREATE: &[&str] = &["create"];
/// componentstatuses.
const GET_LIST: &[&str] = &["get", "list"];
/// `status`, `scale`, `approval`, `ephemeralcontainers`, `resize`.
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];
/// `attach`, `exec`, `portforward` (connect subresources answering GET and POST).
const CREATE_GET: &[&str] = &["create", "get"];
/// `proxy` (connect subresources answering every method).
const PROXY: &[&str] = &["create", "delete", "get", "patch", "update"];
/// `pods/log`.
const GET: &[&str] = &["get"];
/// `namespaces/finalize`.
const UPDATE: &[&str] = &["update"];

/// The `all` category (`kubectl get all`).
const ALL: &[&str] = &["all"];
/// The `api-extensions` category (webhook configurations, admission policies, CRDs, APIServices).
const API_EXTENSIONS: &[&str] = &["api-extensions"];

/// A subresource whose response kind is the given one.
const fn sub(
    name: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
) -> SubresourceInfo {
    SubresourceInfo {
        name,
        group,
        version,
        kind,
        verbs,
    }
}

/// The `status` subresource of a resource whose kind is `group/version` `kind`.
const fn status(group: &'static str, version: &'static str, kind: &'static str) -> SubresourceInfo {
    sub("status", group, version, kind, GET_PATCH_UPDATE)
}

/// The `scale` subresource: always `autoscaling/v1` `Scale`.
const SCALE: SubresourceInfo = sub("scale", "autoscaling", "v1", "Scale", GET_PATCH_UPDATE);

/// An ordinary stored resource with all eight verbs and nothing else; entries override fields
/// with struct update syntax.
const fn stored(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
) -> ResourceInfo {
    ResourceInfo {
        group,
        version,
        kind,
        plural,
        singular,
        namespaced,
        verbs: CRUD,
        short_names: &[],
        categories: &[],
        subresources: &[],
        kind_class: KindClass::Stored,
    }
}

/// A create-only review resource.
const fn review(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
) -> ResourceInfo {
    ResourceInfo {
        verbs: CREATE,
        kind_class: KindClass::Review,
        ..stored(group, "v1", kind, plural, singular, namespaced)
    }
}

/// The horizontalpodautoscalers resource of `autoscaling/<version>`, whose `status`
/// subresource is `subresources`.
const fn hpa(version: &'static str, subresources: &'static [SubresourceInfo]) -> ResourceInfo {
    ResourceInfo {
        short_names: &["hpa"],
        categories: ALL,
        subresources,
        ..stored(
            "autoscaling",
            version,
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            "horizontalpodautoscaler",
            true,
        )
    }
}

/// `autoscaling/v2` horizontalpodautoscalers' subresources.
const HPA_V2_SUBRESOURCES: &[SubresourceInfo] =
    &[status("autoscaling", "v2", "HorizontalPodAutoscaler")];
/// `autoscaling/v1` horizontalpodautoscalers' subresources.
const HPA_V1_SUBRESOURCES: &[SubresourceInfo] =
    &[status("autoscaling", "v1", "HorizontalPodAutoscaler")];

/// Every built-in resource kube-apiserver v1.33 serves by default, in discovery order.
pub static BUILTIN: &[ResourceInfo] = &[
    // ---- core/v1 (/api/v1) ----
    ResourceInfo {
        verbs: CREATE,
        kind_class: KindClass::Virtual,
        ..stored("", "v1", "Binding", "bindings", "binding", true)
    },
    ResourceInfo {
        verbs: GET_LIST,
        short_names: &["cs"],
        kind_class: KindClass::Virtual,
        ..stored(
            "",
            "v1",
            "ComponentStatus",
            "componentstatuses",
            "componentstatus",
            false,
        )
    },
    ResourceInfo {
        short_names: &["cm"],
        ..stored("", "v1", "ConfigMap", "configmaps", "configmap", true)
    },
    ResourceInfo {
        short_names: &["ep"],
        ..stored("", "v1", "Endpoints", "endpoints", "endpoints", true)
    },
    ResourceInfo {
        short_names: &["ev"],
        ..stored("", "v1", "Event", "events", "event", true)
    },
    ResourceInfo {
        short_names: &["limits"],
        ..stored("", "v1", "LimitRange", "limitranges", "limitrange", true)
    },
    ResourceInfo {
        verbs: CRUD_NO_DELETECOLLECTION,
        short_names: &["ns"],
        subresources: &[
            sub("finalize", "", "v1", "Namespace", UPDATE),
            status("", "v1", "Namespace"),
        ],
        ..stored("", "v1", "Namespace", "namespaces", "namespace", false)
    },
    ResourceInfo {
        short_names: &["no"],
        subresources: &[
            sub("proxy", "", "v1", "NodeProxyOptions", PROXY),
            status("", "v1", "Node"),
        ],
        ..stored("", "v1", "Node", "nodes", "node", false)
    },
    ResourceInfo {
        short_names: &["pvc"],
        subresources: &[status("", "v1", "PersistentVolumeClaim")],
        ..stored(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            true,
        )
    },
    ResourceInfo {
        short_names: &["pv"],
        subresources: &[status("", "v1", "PersistentVolume")],
        ..stored(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            "persistentvolume",
            false,
        )
    },
    ResourceInfo {
        short_names: &["po"],
        categories: ALL,
        subresources: &[
            sub("attach", "", "v1", "PodAttachOptions", CREATE_GET),
            sub("binding", "", "v1", "Binding", CREATE),
            sub("ephemeralcontainers", "", "v1", "Pod", GET_PATCH_UPDATE),
            sub("eviction", "policy", "v1", "Eviction", CREATE),
            sub("exec", "", "v1", "PodExecOptions", CREATE_GET),
            sub("log", "", "v1", "Pod", GET),
            sub("portforward", "", "v1", "PodPortForwardOptions", CREATE_GET),
            sub("proxy", "", "v1", "PodProxyOptions", PROXY),
            sub("resize", "", "v1", "Pod", GET_PATCH_UPDATE),
            status("", "v1", "Pod"),
        ],
        ..stored("", "v1", "Pod", "pods", "pod", true)
    },
    stored("", "v1", "PodTemplate", "podtemplates", "podtemplate", true),
    ResourceInfo {
        short_names: &["rc"],
        categories: ALL,
        subresources: &[SCALE, status("", "v1", "ReplicationController")],
        ..stored(
            "",
            "v1",
            "ReplicationController",
            "replicationcontrollers",
            "replicationcontroller",
            true,
        )
    },
    ResourceInfo {
        short_names: &["quota"],
        subresources: &[status("", "v1", "ResourceQuota")],
        ..stored(
            "",
            "v1",
            "ResourceQuota",
            "resourcequotas",
            "resourcequota",
            true,
        )
    },
    stored("", "v1", "Secret", "secrets", "secret", true),
    ResourceInfo {
        short_names: &["sa"],
        subresources: &[sub(
            "token",
            "authentication.k8s.io",
            "v1",
            "TokenRequest",
            CREATE,
        )],
        ..stored(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            "serviceaccount",
            true,
        )
    },
    ResourceInfo {
        short_names: &["svc"],
        categories: ALL,
        subresources: &[
            sub("proxy", "", "v1", "ServiceProxyOptions", PROXY),
            status("", "v1", "Service"),
        ],
        ..stored("", "v1", "Service", "services", "service", true)
    },
    // ---- apiregistration.k8s.io/v1 ----
    ResourceInfo {
        categories: API_EXTENSIONS,
        subresources: &[status("apiregistration.k8s.io", "v1", "APIService")],
        ..stored(
            "apiregistration.k8s.io",
            "v1",
            "APIService",
            "apiservices",
            "apiservice",
            false,
        )
    },
    // ---- apps/v1 ----
    stored(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        "controllerrevision",
        true,
    ),
    ResourceInfo {
        short_names: &["ds"],
        categories: ALL,
        subresources: &[status("apps", "v1", "DaemonSet")],
        ..stored("apps", "v1", "DaemonSet", "daemonsets", "daemonset", true)
    },
    ResourceInfo {
        short_names: &["deploy"],
        categories: ALL,
        subresources: &[SCALE, status("apps", "v1", "Deployment")],
        ..stored(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            "deployment",
            true,
        )
    },
    ResourceInfo {
        short_names: &["rs"],
        categories: ALL,
        subresources: &[SCALE, status("apps", "v1", "ReplicaSet")],
        ..stored(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            "replicaset",
            true,
        )
    },
    ResourceInfo {
        short_names: &["sts"],
        categories: ALL,
        subresources: &[SCALE, status("apps", "v1", "StatefulSet")],
        ..stored(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            "statefulset",
            true,
        )
    },
    // ---- events.k8s.io/v1 ----
    ResourceInfo {
        short_names: &["ev"],
        ..stored("events.k8s.io", "v1", "Event", "events", "event", true)
    },
    // ---- authentication.k8s.io/v1 ----
    review(
        "authentication.k8s.io",
        "SelfSubjectReview",
        "selfsubjectreviews",
        "selfsubjectreview",
        false,
    ),
    review(
        "authentication.k8s.io",
        "TokenReview",
        "tokenreviews",
        "tokenreview",
        false,
    ),
    // ---- authorization.k8s.io/v1 ----
    review(
        "authorization.k8s.io",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        true,
    ),
    review(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        false,
    ),
    review(
        "authorization.k8s.io",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        false,
    ),
    review(
        "authorization.k8s.io",
        "SubjectAccessReview",
        "subjectaccessreviews",
        "subjectaccessreview",
        false,
    ),
    // ---- autoscaling/v2 (preferred), autoscaling/v1 ----
    hpa("v2", HPA_V2_SUBRESOURCES),
    hpa("v1", HPA_V1_SUBRESOURCES),
    // ---- batch/v1 ----
    ResourceInfo {
        short_names: &["cj"],
        categories: ALL,
        subresources: &[status("batch", "v1", "CronJob")],
        ..stored("batch", "v1", "CronJob", "cronjobs", "cronjob", true)
    },
    ResourceInfo {
        categories: ALL,
        subresources: &[status("batch", "v1", "Job")],
        ..stored("batch", "v1", "Job", "jobs", "job", true)
    },
    // ---- certificates.k8s.io/v1 ----
    ResourceInfo {
        short_names: &["csr"],
        subresources: &[
            sub(
                "approval",
                "certificates.k8s.io",
                "v1",
                "CertificateSigningRequest",
                GET_PATCH_UPDATE,
            ),
            status("certificates.k8s.io", "v1", "CertificateSigningRequest"),
        ],
        ..stored(
            "certificates.k8s.io",
            "v1",
            "CertificateSigningRequest",
            "certificatesigningrequests",
            "certificatesigningrequest",
            false,
        )
    },
    // ---- networking.k8s.io/v1 ----
    stored(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        "ingressclass",
        false,
    ),
    ResourceInfo {
        short_names: &["ing"],
        subresources: &[status("networking.k8s.io", "v1", "Ingress")],
        ..stored(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            "ingress",
            true,
        )
    },
    ResourceInfo {
        short_names: &["ip"],
        ..stored(
            "networking.k8s.io",
            "v1",
            "IPAddress",
            "ipaddresses",
            "ipaddress",
            false,
        )
    },
    ResourceInfo {
        short_names: &["netpol"],
        ..stored(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            "networkpolicy",
            true,
        )
    },
    ResourceInfo {
        subresources: &[status("networking.k8s.io", "v1", "ServiceCIDR")],
        ..stored(
            "networking.k8s.io",
            "v1",
            "ServiceCIDR",
            "servicecidrs",
            "servicecidr",
            false,
        )
    },
    // ---- policy/v1 ----
    ResourceInfo {
        short_names: &["pdb"],
        subresources: &[status("policy", "v1", "PodDisruptionBudget")],
        ..stored(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            true,
        )
    },
    // ---- rbac.authorization.k8s.io/v1 ----
    stored(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        "clusterrolebinding",
        false,
    ),
    stored(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        "clusterrole",
        false,
    ),
    stored(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        "rolebinding",
        true,
    ),
    stored(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        "role",
        true,
    ),
    // ---- storage.k8s.io/v1 ----
    stored(
        "storage.k8s.io",
        "v1",
        "CSIDriver",
        "csidrivers",
        "csidriver",
        false,
    ),
    stored(
        "storage.k8s.io",
        "v1",
        "CSINode",
        "csinodes",
        "csinode",
        false,
    ),
    stored(
        "storage.k8s.io",
        "v1",
        "CSIStorageCapacity",
        "csistoragecapacities",
        "csistoragecapacity",
        true,
    ),
    ResourceInfo {
        short_names: &["sc"],
        ..stored(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            "storageclass",
            false,
        )
    },
    ResourceInfo {
        subresources: &[status("storage.k8s.io", "v1", "VolumeAttachment")],
        ..stored(
            "storage.k8s.io",
            "v1",
            "VolumeAttachment",
            "volumeattachments",
            "volumeattachment",
            false,
        )
    },
    // ---- admissionregistration.k8s.io/v1 ----
    ResourceInfo {
        categories: API_EXTENSIONS,
        ..stored(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            "mutatingwebhookconfiguration",
            false,
        )
    },
    ResourceInfo {
        categories: API_EXTENSIONS,
        subresources: &[status(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        )],
        ..stored(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            "validatingadmissionpolicy",
            false,
        )
    },
    ResourceInfo {
        categories: API_EXTENSIONS,
        ..stored(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            "validatingadmissionpolicybinding",
            false,
        )
    },
    ResourceInfo {
        categories: API_EXTENSIONS,
        ..stored(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            "validatingwebhookconfiguration",
            false,
        )
    },
    // ---- apiextensions.k8s.io/v1 ----
    ResourceInfo {
        short_names: &["crd", "crds"],
        categories: API_EXTENSIONS,
        subresources: &[status(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        )],
        ..stored(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            "customresourcedefinition",
            false,
        )
    },
    // ---- scheduling.k8s.io/v1 ----
    ResourceInfo {
        short_names: &["pc"],
        ..stored(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
            "priorityclass",
            false,
        )
    },
    // ---- coordination.k8s.io/v1 ----
    stored(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        "lease",
        true,
    ),
    // ---- node.k8s.io/v1 ----
    stored(
        "node.k8s.io",
        "v1",
        "RuntimeClass",
        "runtimeclasses",
        "runtimeclass",
        false,
    ),
    // ---- discovery.k8s.io/v1 ----
    stored(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        "endpointslice",
        true,
    ),
    // ---- flowcontrol.apiserver.k8s.io/v1 ----
    ResourceInfo {
        subresources: &[status("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema")],
        ..stored(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "FlowSchema",
            "flowschemas",
            "flowschema",
            false,
        )
    },
    ResourceInfo {
        subresources: &[status(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "PriorityLevelConfiguration",
        )],
        ..stored(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "PriorityLevelConfiguration",
            "prioritylevelconfigurations",
            "prioritylevelconfiguration",
            false,
        )
    },
];

/// Looks a resource up by group (`""` for core), version and plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    BUILTIN
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{
        ClusterResourceScope, ListableResource, NamespaceResourceScope, Resource, SubResourceScope,
    };
    use std::any::TypeId;
    use std::collections::HashSet;

    /// Groups in the order `/api` and `/apis` list them in v1.33.
    const GROUP_ORDER: &[&str] = &[
        "",
        "apiregistration.k8s.io",
        "apps",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "networking.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "node.k8s.io",
        "discovery.k8s.io",
        "flowcontrol.apiserver.k8s.io",
    ];

    /// Whether `T` is namespaced according to k8s-openapi; panics on a subresource type.
    fn openapi_namespaced<T>() -> bool
    where
        T: Resource,
        T::Scope: 'static,
    {
        let scope = TypeId::of::<T::Scope>();
        assert_ne!(
            scope,
            TypeId::of::<SubResourceScope>(),
            "{} is a subresource",
            T::KIND
        );
        if scope == TypeId::of::<NamespaceResourceScope>() {
            true
        } else {
            assert_eq!(scope, TypeId::of::<ClusterResourceScope>(), "{}", T::KIND);
            false
        }
    }

    /// Checks the catalog entry for `T` against k8s-openapi's constants; returns its key.
    fn check_served<T>() -> (&'static str, &'static str, &'static str)
    where
        T: Resource,
        T::Scope: 'static,
    {
        let info = find(T::GROUP, T::VERSION, T::URL_PATH_SEGMENT).unwrap_or_else(|| {
            panic!(
                "{}/{} {} is not in BUILTIN",
                T::GROUP,
                T::VERSION,
                T::URL_PATH_SEGMENT
            )
        });
        assert_eq!(info.group, T::GROUP);
        assert_eq!(info.version, T::VERSION);
        assert_eq!(info.kind, T::KIND, "kind of {}", info.plural);
        assert_eq!(info.plural, T::URL_PATH_SEGMENT);
        assert_eq!(
            info.namespaced,
            openapi_namespaced::<T>(),
            "scope of {}",
            info.plural
        );
        (T::GROUP, T::VERSION, T::URL_PATH_SEGMENT)
    }

    /// Asserts that v1.33 does not serve `T` by default, so it must not be in the catalog.
    fn check_not_served<T: ListableResource>() {
        assert!(
            find(T::GROUP, T::VERSION, T::URL_PATH_SEGMENT).is_none(),
            "{}/{} {} is off by default in v1.33 but is in BUILTIN",
            T::GROUP,
            T::VERSION,
            T::URL_PATH_SEGMENT
        );
    }

    /// Runs `check_served` over each type and collects the keys.
    macro_rules! served {
        ($($ty:ty),* $(,)?) => {
            vec![$(check_served::<$ty>()),*]
        };
    }

    /// Compile-time proof that each type is a `ListableResource`, then `check_not_served`.
    macro_rules! not_served {
        ($($ty:ty),* $(,)?) => {{
            $(check_not_served::<$ty>();)*
            [$(stringify!($ty)),*].len()
        }};
    }

    /// Every listable k8s-openapi v1_33 type the catalog serves (enumerated with
    /// `grep -rl 'impl crate::ListableResource for' src/v1_33`), checked against its entry.
    fn served_listable() -> Vec<(&'static str, &'static str, &'static str)> {
        use k8s_openapi::api::{
            admissionregistration, apps, autoscaling, batch, certificates, coordination, core,
            discovery, events, flowcontrol, networking, node, policy, rbac, scheduling, storage,
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
        use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
        served![
            admissionregistration::v1::MutatingWebhookConfiguration,
            admissionregistration::v1::ValidatingAdmissionPolicy,
            admissionregistration::v1::ValidatingAdmissionPolicyBinding,
            admissionregistration::v1::ValidatingWebhookConfiguration,
            apps::v1::ControllerRevision,
            apps::v1::DaemonSet,
            apps::v1::Deployment,
            apps::v1::ReplicaSet,
            apps::v1::StatefulSet,
            autoscaling::v1::HorizontalPodAutoscaler,
            autoscaling::v2::HorizontalPodAutoscaler,
            batch::v1::CronJob,
            batch::v1::Job,
            certificates::v1::CertificateSigningRequest,
            coordination::v1::Lease,
            core::v1::ComponentStatus,
            core::v1::ConfigMap,
            core::v1::Endpoints,
            core::v1::Event,
            core::v1::LimitRange,
            core::v1::Namespace,
            core::v1::Node,
            core::v1::PersistentVolume,
            core::v1::PersistentVolumeClaim,
            core::v1::Pod,
            core::v1::PodTemplate,
            core::v1::ReplicationController,
            core::v1::ResourceQuota,
            core::v1::Secret,
            core::v1::Service,
            core::v1::ServiceAccount,
            discovery::v1::EndpointSlice,
            events::v1::Event,
            flowcontrol::v1::FlowSchema,
            flowcontrol::v1::PriorityLevelConfiguration,
            networking::v1::Ingress,
            networking::v1::IngressClass,
            networking::v1::IPAddress,
            networking::v1::NetworkPolicy,
            networking::v1::ServiceCIDR,
            node::v1::RuntimeClass,
            policy::v1::PodDisruptionBudget,
            rbac::v1::ClusterRole,
            rbac::v1::ClusterRoleBinding,
            rbac::v1::Role,
            rbac::v1::RoleBinding,
            scheduling::v1::PriorityClass,
            storage::v1::CSIDriver,
            storage::v1::CSINode,
            storage::v1::CSIStorageCapacity,
            storage::v1::StorageClass,
            storage::v1::VolumeAttachment,
            apiextensions::v1::CustomResourceDefinition,
            apiregistration::v1::APIService,
        ]
    }

    /// The listable k8s-openapi v1_33 types that v1.33 does not serve by default (alpha, and
    /// beta APIs, which are off by default); returns how many there are.
    fn not_served_listable() -> usize {
        use k8s_openapi::api::{
            admissionregistration, apiserverinternal, certificates, coordination, networking,
            resource, storage, storagemigration,
        };
        not_served![
            admissionregistration::v1alpha1::MutatingAdmissionPolicy,
            admissionregistration::v1alpha1::MutatingAdmissionPolicyBinding,
            admissionregistration::v1beta1::ValidatingAdmissionPolicy,
            admissionregistration::v1beta1::ValidatingAdmissionPolicyBinding,
            apiserverinternal::v1alpha1::StorageVersion,
            certificates::v1alpha1::ClusterTrustBundle,
            certificates::v1beta1::ClusterTrustBundle,
            coordination::v1alpha2::LeaseCandidate,
            coordination::v1beta1::LeaseCandidate,
            networking::v1beta1::IPAddress,
            networking::v1beta1::ServiceCIDR,
            resource::v1alpha3::DeviceClass,
            resource::v1alpha3::DeviceTaintRule,
            resource::v1alpha3::ResourceClaim,
            resource::v1alpha3::ResourceClaimTemplate,
            resource::v1alpha3::ResourceSlice,
            resource::v1beta1::DeviceClass,
            resource::v1beta1::ResourceClaim,
            resource::v1beta1::ResourceClaimTemplate,
            resource::v1beta1::ResourceSlice,
            resource::v1beta2::DeviceClass,
            resource::v1beta2::ResourceClaim,
            resource::v1beta2::ResourceClaimTemplate,
            resource::v1beta2::ResourceSlice,
            storage::v1alpha1::VolumeAttributesClass,
            storage::v1beta1::VolumeAttributesClass,
            storagemigration::v1alpha1::StorageVersionMigration,
        ]
    }

    /// The served resources that k8s-openapi models as non-listable `Resource`s.
    fn served_unlistable() -> Vec<(&'static str, &'static str, &'static str)> {
        use k8s_openapi::api::{authentication, authorization, core};
        served![
            core::v1::Binding,
            authentication::v1::SelfSubjectReview,
            authentication::v1::TokenReview,
            authorization::v1::LocalSubjectAccessReview,
            authorization::v1::SelfSubjectAccessReview,
            authorization::v1::SelfSubjectRulesReview,
            authorization::v1::SubjectAccessReview,
        ]
    }

    #[test]
    fn every_entry_agrees_with_its_k8s_openapi_type() {
        let mut keys = served_listable();
        keys.extend(served_unlistable());
        let unique: HashSet<_> = keys.iter().copied().collect();
        assert_eq!(unique.len(), keys.len(), "a type is listed twice");
        for r in BUILTIN {
            assert!(
                unique.contains(&(r.group, r.version, r.plural)),
                "{}/{} {} has no k8s-openapi type in the test lists",
                r.group,
                r.version,
                r.plural
            );
        }
        assert_eq!(unique.len(), BUILTIN.len());
    }

    #[test]
    fn every_listable_k8s_openapi_type_is_served_or_known_off_by_default() {
        // 81 = `grep -rl 'impl crate::ListableResource for' src/v1_33 | wc -l` in
        // k8s-openapi 0.29.0; a new listable type must be added to one of the two lists.
        assert_eq!(served_listable().len() + not_served_listable(), 81);
    }

    #[test]
    fn reviews_and_virtual_resources_are_classified() {
        for r in BUILTIN {
            match r.kind_class {
                KindClass::Review => {
                    assert!(r.kind.ends_with("Review"), "{}", r.kind);
                    assert_eq!(r.verbs, CREATE, "{}", r.plural);
                    assert!(r.subresources.is_empty());
                }
                KindClass::Virtual => {
                    assert!(["bindings", "componentstatuses"].contains(&r.plural));
                    assert_eq!(r.group, "");
                }
                KindClass::Stored => {
                    assert!(r.has_verb("watch") && r.has_verb("list") && r.has_verb("create"));
                    assert!(!r.kind.ends_with("Review"), "{}", r.kind);
                }
                KindClass::Custom { .. } => panic!("{} is built in", r.plural),
            }
        }
        assert_eq!(
            BUILTIN
                .iter()
                .filter(|r| r.kind_class == KindClass::Review)
                .count(),
            6
        );
    }

    #[test]
    fn subresource_kinds_agree_with_k8s_openapi() {
        use k8s_openapi::api::{authentication, autoscaling, core, policy};

        fn check<T: Resource>(sub: &SubresourceInfo) {
            assert_eq!(
                (sub.group, sub.version, sub.kind),
                (T::GROUP, T::VERSION, T::KIND),
                "{}",
                sub.name
            );
        }

        let pods = find("", "v1", "pods").unwrap();
        check::<core::v1::Binding>(pods.subresource("binding").unwrap());
        check::<policy::v1::Eviction>(pods.subresource("eviction").unwrap());
        check::<core::v1::Pod>(pods.subresource("status").unwrap());
        check::<core::v1::Pod>(pods.subresource("resize").unwrap());
        check::<core::v1::Pod>(pods.subresource("ephemeralcontainers").unwrap());
        let sa = find("", "v1", "serviceaccounts").unwrap();
        check::<authentication::v1::TokenRequest>(sa.subresource("token").unwrap());
        assert_eq!(
            authentication::v1::TokenRequest::URL_PATH_SEGMENT,
            sa.subresources[0].name
        );

        let mut scales = 0;
        for r in BUILTIN {
            for s in r.subresources {
                if s.name == "scale" {
                    check::<autoscaling::v1::Scale>(s);
                    scales += 1;
                }
                if s.name == "status" {
                    assert_eq!((s.group, s.version, s.kind), (r.group, r.version, r.kind));
                    assert_eq!(s.verbs, GET_PATCH_UPDATE);
                }
            }
        }
        // replicationcontrollers, deployments, replicasets, statefulsets.
        assert_eq!(scales, 4);
    }

    #[test]
    fn no_two_entries_share_group_version_and_plural() {
        let mut seen = HashSet::new();
        for r in BUILTIN {
            assert!(
                seen.insert((r.group, r.version, r.plural)),
                "duplicate {}",
                r.plural
            );
            let names: HashSet<_> = r.subresources.iter().map(|s| s.name).collect();
            assert_eq!(
                names.len(),
                r.subresources.len(),
                "duplicate subresource in {}",
                r.plural
            );
        }
    }

    #[test]
    fn find_looks_up_by_group_version_and_plural() {
        let d = find("apps", "v1", "deployments").unwrap();
        assert_eq!(d.kind, "Deployment");
        assert_eq!(d.short_names, ["deploy"]);
        let scale = d.subresource("scale").unwrap();
        assert_eq!(
            (scale.group, scale.version, scale.kind),
            ("autoscaling", "v1", "Scale")
        );

        assert_eq!(find("", "v1", "pods").unwrap().short_names, ["po"]);
        assert_eq!(
            find("autoscaling", "v1", "horizontalpodautoscalers")
                .unwrap()
                .version,
            "v1"
        );
        assert_eq!(
            find("autoscaling", "v2", "horizontalpodautoscalers")
                .unwrap()
                .version,
            "v2"
        );
        assert_eq!(
            find("events.k8s.io", "v1", "events").unwrap().group,
            "events.k8s.io"
        );
        assert_eq!(find("", "v1", "events").unwrap().group, "");

        assert!(find("", "v1", "deployments").is_none());
        assert!(find("apps", "v1beta1", "deployments").is_none());
        assert!(find("apps", "v1", "deployment").is_none());
        assert!(find("apps", "v1", "Deployments").is_none());
        assert!(find("resource.k8s.io", "v1beta1", "resourceclaims").is_none());
    }

    #[test]
    fn entries_follow_discovery_order() {
        let mut last: Option<&ResourceInfo> = None;
        for r in BUILTIN {
            let gi = GROUP_ORDER
                .iter()
                .position(|g| *g == r.group)
                .expect(r.group);
            if let Some(p) = last {
                let pi = GROUP_ORDER.iter().position(|g| *g == p.group).unwrap();
                assert!(pi <= gi, "{} comes after {}", p.group, r.group);
                if pi == gi && p.version == r.version {
                    assert!(p.plural < r.plural, "{} before {}", p.plural, r.plural);
                }
            }
            let names: Vec<_> = r.subresources.iter().map(|s| s.name).collect();
            assert!(names.is_sorted(), "subresources of {} not sorted", r.plural);
            assert!(r.verbs.is_sorted(), "verbs of {} not sorted", r.plural);
            for s in r.subresources {
                assert!(s.verbs.is_sorted(), "verbs of {}/{}", r.plural, s.name);
            }
            last = Some(r);
        }
        // Preferred version first.
        let hpa: Vec<_> = BUILTIN
            .iter()
            .filter(|r| r.plural == "horizontalpodautoscalers")
            .map(|r| r.version)
            .collect();
        assert_eq!(hpa, ["v2", "v1"]);
    }

    #[test]
    fn kubectl_short_names_and_categories() {
        let short = |g: &str, p: &str| find(g, "v1", p).unwrap().short_names;
        for (g, p, s) in [
            ("", "pods", "po"),
            ("", "services", "svc"),
            ("", "namespaces", "ns"),
            ("", "nodes", "no"),
            ("", "configmaps", "cm"),
            ("", "endpoints", "ep"),
            ("", "events", "ev"),
            ("", "persistentvolumes", "pv"),
            ("", "persistentvolumeclaims", "pvc"),
            ("", "serviceaccounts", "sa"),
            ("", "replicationcontrollers", "rc"),
            ("", "resourcequotas", "quota"),
            ("", "limitranges", "limits"),
            ("", "componentstatuses", "cs"),
            ("apps", "deployments", "deploy"),
            ("apps", "replicasets", "rs"),
            ("apps", "statefulsets", "sts"),
            ("apps", "daemonsets", "ds"),
            ("batch", "cronjobs", "cj"),
            ("policy", "poddisruptionbudgets", "pdb"),
            ("scheduling.k8s.io", "priorityclasses", "pc"),
            ("storage.k8s.io", "storageclasses", "sc"),
            ("certificates.k8s.io", "certificatesigningrequests", "csr"),
            ("networking.k8s.io", "networkpolicies", "netpol"),
            ("networking.k8s.io", "ingresses", "ing"),
            ("networking.k8s.io", "ipaddresses", "ip"),
            ("events.k8s.io", "events", "ev"),
        ] {
            assert_eq!(short(g, p), [s], "{p}");
        }
        assert_eq!(
            short("apiextensions.k8s.io", "customresourcedefinitions"),
            ["crd", "crds"]
        );
        assert!(short("batch", "jobs").is_empty());
        assert!(short("", "secrets").is_empty());

        let mut all: Vec<_> = BUILTIN
            .iter()
            .filter(|r| r.categories == ALL)
            .map(|r| r.plural)
            .collect();
        all.sort_unstable();
        assert_eq!(
            all,
            [
                "cronjobs",
                "daemonsets",
                "deployments",
                "horizontalpodautoscalers",
                "horizontalpodautoscalers",
                "jobs",
                "pods",
                "replicasets",
                "replicationcontrollers",
                "services",
                "statefulsets",
            ]
        );
        let ext = BUILTIN
            .iter()
            .filter(|r| r.categories == API_EXTENSIONS)
            .count();
        assert_eq!(ext, 6);
    }
}
