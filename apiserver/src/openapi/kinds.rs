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
    use k8s_openapi::api::{
        admissionregistration, apps, authentication, authorization, autoscaling, batch,
        certificates, coordination, core, discovery, events, flowcontrol, networking, node, policy,
        rbac, scheduling, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
    kinds![
        admissionregistration::v1::MutatingWebhookConfiguration,
        admissionregistration::v1::ValidatingAdmissionPolicy,
        admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        admissionregistration::v1::ValidatingWebhookConfiguration,
        apps::v1::ControllerRevision,
        apps::v1::DaemonSet,
        apps::v1::Deployment,
        apps::v1::ReplicaSet,
        apps::v1::StatefulSet,
        authentication::v1::SelfSubjectReview,
        authentication::v1::TokenReview,
        authorization::v1::LocalSubjectAccessReview,
        authorization::v1::SelfSubjectAccessReview,
        authorization::v1::SelfSubjectRulesReview,
        authorization::v1::SubjectAccessReview,
        autoscaling::v1::HorizontalPodAutoscaler,
        autoscaling::v2::HorizontalPodAutoscaler,
        batch::v1::CronJob,
        batch::v1::Job,
        certificates::v1::CertificateSigningRequest,
        coordination::v1::Lease,
        core::v1::Binding,
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
