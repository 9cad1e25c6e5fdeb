//! The registry: which resources this server serves, and how an object of each is keyed.
//!
//! One generic code path serves every resource (`crate::handlers`); a resource is only a
//! [`catalog::ResourceInfo`] row. Every stored built-in kind is served at every version
//! kube-apiserver v1.33 serves by default (the catalog's rows: `autoscaling/v2` and
//! `autoscaling/v1` HPAs are the one kind with two); a resource that upstream stores as
//! another resource's objects (`events.k8s.io/v1` events: core/v1 Events; `autoscaling/v1`
//! HPAs: `autoscaling/v2` ones) shares that resource's keys and is converted on the way in and
//! out ([`convert`]).

pub mod catalog;
pub mod convert;
pub mod custom;
pub mod typed;
pub(crate) mod types;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use catalog::{KindClass, ResourceInfo};

/// Subresources the generic handlers implement; discovery lists only these.
pub const SERVED_SUBRESOURCES: &[&str] = &[
    "status",
    "scale",
    "binding",
    "finalize",
    "token",
    "eviction",
    "log",
    "exec",
    "attach",
    "portforward",
    "approval",
    "ephemeralcontainers",
];

/// The resources being served.
#[derive(Debug)]
pub struct Registry {
    served: Vec<&'static ResourceInfo>,
    /// The create-only reviews (access reviews, SelfSubjectReview, TokenReview), at their
    /// preferred versions, and the computed `componentstatuses`: listed by discovery, never
    /// stored.
    reviews: Vec<&'static ResourceInfo>,
    by_path: HashMap<(String, String, String), &'static ResourceInfo>,
    /// The served versions of established CRDs, replaced whole on every CRD change.
    custom: RwLock<CustomSet>,
}

/// The custom resources being served.
#[derive(Debug, Default)]
struct CustomSet {
    /// In discovery order: groups by name, versions in Kubernetes order, then by plural.
    served: Vec<Arc<custom::CustomVersion>>,
    by_path: HashMap<(String, String, String), Arc<custom::CustomVersion>>,
    /// Bumped on every change (discovery's ETag).
    generation: u64,
}

impl Registry {
    /// Every stored built-in resource at every version the catalog lists (preferred first).
    pub fn builtin() -> Self {
        let mut served: Vec<&'static ResourceInfo> = Vec::new();
        let mut reviews: Vec<&'static ResourceInfo> = Vec::new();
        for r in catalog::BUILTIN {
            // componentstatuses: computed on each read (`handlers::component_status`).
            let computed = r.kind_class == KindClass::Virtual && r.plural == "componentstatuses";
            if (matches!(r.kind_class, KindClass::Review) || computed)
                && !reviews
                    .iter()
                    .any(|s| s.group == r.group && s.plural == r.plural)
            {
                reviews.push(r);
            }
            if !matches!(r.kind_class, KindClass::Stored) {
                continue;
            }
            served.push(r);
        }
        let by_path = served
            .iter()
            .map(|r| {
                (
                    (
                        r.group.to_owned(),
                        r.version.to_owned(),
                        r.plural.to_owned(),
                    ),
                    *r,
                )
            })
            .collect();
        let mut by_path: HashMap<(String, String, String), &'static ResourceInfo> = by_path;
        // componentstatuses is found like a served resource (its handler computes it).
        if let Some(cs) = reviews.iter().find(|r| r.kind_class == KindClass::Virtual) {
            by_path.insert((cs.group.into(), cs.version.into(), cs.plural.into()), *cs);
        }
        Registry {
            served,
            reviews,
            by_path,
            custom: RwLock::new(CustomSet::default()),
        }
    }

    /// The resource served at `group`/`version`/`plural`: built-in, or a custom resource.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
        let key = (group.to_owned(), version.to_owned(), plural.to_owned());
        if let Some(r) = self.by_path.get(&key) {
            return Some(*r);
        }
        self.read_custom().by_path.get(&key).map(|c| c.info)
    }

    /// The built-in resources served, in discovery order.
    pub fn resources(&self) -> &[&'static ResourceInfo] {
        &self.served
    }

    /// What a CRD says of custom resource `r` (schema, printer columns, …); `None` for
    /// built-in resources.
    pub fn custom(&self, r: &ResourceInfo) -> Option<Arc<custom::CustomVersion>> {
        if !matches!(r.kind_class, KindClass::Custom { .. }) {
            return None;
        }
        let key = (
            r.group.to_owned(),
            r.version.to_owned(),
            r.plural.to_owned(),
        );
        self.read_custom().by_path.get(&key).cloned()
    }

    /// Every served custom version, in discovery order.
    pub fn custom_resources(&self) -> Vec<Arc<custom::CustomVersion>> {
        self.read_custom().served.clone()
    }

    /// Replaces the served custom versions (the CRD controller's view of every established
    /// CRD); returns whether discovery changed.
    pub fn set_custom(&self, versions: Vec<custom::CustomVersion>) -> bool {
        let mut versions: Vec<Arc<custom::CustomVersion>> =
            versions.into_iter().map(Arc::new).collect();
        versions.sort_by(|a, b| {
            a.info
                .group
                .cmp(b.info.group)
                .then_with(|| custom::kube_version_order(a.info.version, b.info.version))
                .then_with(|| a.info.plural.cmp(b.info.plural))
        });
        let by_path = versions
            .iter()
            .map(|c| {
                let key = (
                    c.info.group.to_owned(),
                    c.info.version.to_owned(),
                    c.info.plural.to_owned(),
                );
                (key, Arc::clone(c))
            })
            .collect();
        custom::publish(&versions);
        let mut set = self.custom.write().unwrap_or_else(PoisonError::into_inner);
        let changed = set.served.len() != versions.len()
            || set
                .served
                .iter()
                .zip(&versions)
                .any(|(a, b)| !std::ptr::eq(a.info, b.info) || a.terminating != b.terminating);
        set.served = versions;
        set.by_path = by_path;
        if changed {
            set.generation += 1;
        }
        changed
    }

    /// A number that changes whenever the custom resources served change (discovery's ETag).
    pub fn custom_generation(&self) -> u64 {
        self.read_custom().generation
    }

    fn read_custom(&self) -> std::sync::RwLockReadGuard<'_, CustomSet> {
        self.custom.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Built-in and custom resources, with the reviews: what discovery lists.
    fn discovered(&self) -> Vec<&'static ResourceInfo> {
        let custom = self.read_custom();
        self.served
            .iter()
            .chain(&self.reviews)
            .copied()
            .chain(custom.served.iter().map(|c| c.info))
            .collect()
    }

    /// Served groups with their versions, in discovery order (core group is "").
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        groups_of(&self.served)
    }

    /// As [`Registry::groups`], with the groups of the reviews and of the custom resources
    /// too (what discovery lists).
    pub fn discovery_groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        groups_of(&self.discovered())
    }

    /// As [`Registry::in_version`], with the reviews and the custom resources too (what
    /// discovery lists).
    pub fn discovery_in_version(&self, group: &str, version: &str) -> Vec<&'static ResourceInfo> {
        self.discovered()
            .into_iter()
            .filter(|r| r.group == group && r.version == version)
            .collect()
    }

    /// Served resources of one group version.
    pub fn in_version(&self, group: &str, version: &str) -> Vec<&'static ResourceInfo> {
        self.served
            .iter()
            .filter(|r| r.group == group && r.version == version)
            .copied()
            .collect()
    }
}

fn groups_of(resources: &[&'static ResourceInfo]) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in resources {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version);
                }
            }
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

/// The storage key of an object: `/registry/<group|core>/<plural>/[<namespace>/]<name>`, with
/// the group and plural of the resource it is stored as ([`convert::stored_as`]).
pub fn key(r: &ResourceInfo, namespace: &str, name: &str) -> String {
    let (group, plural) = convert::stored_as(r);
    let group = if group.is_empty() { "core" } else { group };
    if r.namespaced {
        format!("/registry/{group}/{plural}/{namespace}/{name}")
    } else {
        format!("/registry/{group}/{plural}/{name}")
    }
}

/// The key prefix of a collection (all namespaces when `namespace` is empty).
pub fn prefix(r: &ResourceInfo, namespace: &str) -> String {
    let (group, plural) = convert::stored_as(r);
    let group = if group.is_empty() { "core" } else { group };
    if r.namespaced && !namespace.is_empty() {
        format!("/registry/{group}/{plural}/{namespace}/")
    } else {
        format!("/registry/{group}/{plural}/")
    }
}

/// `apiVersion` of a resource's objects: `v1` or `apps/v1`.
pub fn api_version(r: &ResourceInfo) -> String {
    if r.group.is_empty() {
        r.version.to_owned()
    } else {
        format!("{}/{}", r.group, r.version)
    }
}

#[cfg(test)]
mod review_discovery_tests {
    use super::*;

    #[test]
    fn discovery_lists_reviews_but_the_served_set_does_not() {
        let r = Registry::builtin();
        let listed = |g: &str| {
            r.discovery_in_version(g, "v1")
                .iter()
                .map(|r| r.kind)
                .collect::<Vec<_>>()
        };
        assert!(listed("authentication.k8s.io").contains(&"TokenReview"));
        assert!(listed("authentication.k8s.io").contains(&"SelfSubjectReview"));
        assert!(listed("authorization.k8s.io").contains(&"SubjectAccessReview"));
        assert!(
            r.discovery_groups()
                .iter()
                .any(|(g, _)| *g == "authentication.k8s.io")
        );
        assert!(r.in_version("authentication.k8s.io", "v1").is_empty());
        assert!(
            r.find("authentication.k8s.io", "v1", "tokenreviews")
                .is_none()
        );
    }
}
