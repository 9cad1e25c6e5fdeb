//! Matching helpers shared by the plugins: label selectors, node selector terms and
//! taint tolerations, with upstream's semantics.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorTerm, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Labels of an object (empty map when it has none).
pub type Labels = BTreeMap<String, String>;

/// A parsed label selector requirement.
#[derive(Debug, Clone)]
enum Req {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    /// A requirement that can never match (unknown operator).
    Never,
}

/// A `metav1.LabelSelector` ready for matching. `None` in the API (no selector) matches
/// nothing; an empty selector matches everything.
#[derive(Debug, Clone)]
pub struct Selector {
    reqs: Vec<Req>,
    nothing: bool,
}

impl Selector {
    /// Parses an optional selector as `metav1.LabelSelectorAsSelector` does.
    pub fn new(sel: Option<&LabelSelector>) -> Selector {
        let Some(sel) = sel else {
            return Selector {
                reqs: vec![],
                nothing: true,
            };
        };
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push(Req::In(k.clone(), vec![v.clone()]));
        }
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            reqs.push(match e.operator.as_str() {
                "In" => Req::In(e.key.clone(), values),
                "NotIn" => Req::NotIn(e.key.clone(), values),
                "Exists" => Req::Exists(e.key.clone()),
                "DoesNotExist" => Req::DoesNotExist(e.key.clone()),
                _ => Req::Never,
            });
        }
        Selector {
            reqs,
            nothing: false,
        }
    }

    /// Adds `key In (value)` (used for `matchLabelKeys`).
    pub fn require(&mut self, key: &str, value: &str) {
        self.reqs
            .push(Req::In(key.to_owned(), vec![value.to_owned()]));
    }

    /// True when `labels` satisfy every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        if self.nothing {
            return false;
        }
        self.reqs.iter().all(|r| match r {
            Req::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Req::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Req::Exists(k) => labels.contains_key(k),
            Req::DoesNotExist(k) => !labels.contains_key(k),
            Req::Never => false,
        })
    }
}

/// True when a node (its name and labels) matches a node selector term: every
/// expression and field requirement holds; a term with neither matches nothing.
pub fn term_matches(term: &NodeSelectorTerm, node_name: &str, labels: &Labels) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let expr_ok = exprs.iter().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let v = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => v.is_some_and(|v| values.contains(v)),
            "NotIn" => v.is_none_or(|v| !values.contains(v)),
            "Exists" => v.is_some(),
            "DoesNotExist" => v.is_none(),
            "Gt" | "Lt" => {
                let (Some(v), Some(bound)) = (
                    v.and_then(|v| v.parse::<i64>().ok()),
                    values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if e.operator == "Gt" {
                    v > bound
                } else {
                    v < bound
                }
            }
            _ => false,
        }
    });
    let field_ok = fields.iter().all(|f| {
        let values = f.values.as_deref().unwrap_or_default();
        if f.key != "metadata.name" {
            return false;
        }
        match f.operator.as_str() {
            "In" => values.iter().any(|v| v == node_name),
            "NotIn" => values.iter().all(|v| v != node_name),
            _ => false,
        }
    });
    expr_ok && field_ok
}

/// True when a node matches a required node selector (terms are ORed).
pub fn node_selector_matches(sel: &NodeSelector, node_name: &str, labels: &Labels) -> bool {
    sel.node_selector_terms
        .iter()
        .any(|t| term_matches(t, node_name, labels))
}

/// True when `toleration` tolerates `taint` (`v1.Toleration.ToleratesTaint`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref()
        && !effect.is_empty()
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// True when any of `tolerations` tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorRequirement;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selectors_follow_upstream_semantics() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        assert!(!Selector::new(None).matches(&l));
        assert!(Selector::new(Some(&LabelSelector::default())).matches(&l));
        let sel = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["back".into()]),
            }]),
        };
        assert!(Selector::new(Some(&sel)).matches(&l));
        assert!(!Selector::new(Some(&sel)).matches(&labels(&[("app", "db")])));
    }

    #[test]
    fn node_selector_terms_and_gt() {
        let term = NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "cores".into(),
                operator: "Gt".into(),
                values: Some(vec!["4".into()]),
            }]),
            match_fields: None,
        };
        assert!(term_matches(&term, "n", &labels(&[("cores", "8")])));
        assert!(!term_matches(&term, "n", &labels(&[("cores", "2")])));
        assert!(!term_matches(
            &NodeSelectorTerm::default(),
            "n",
            &labels(&[])
        ));
    }

    #[test]
    fn tolerations_match_taints_as_upstream() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let equal = Toleration {
            key: Some("dedicated".into()),
            value: Some("gpu".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        };
        assert!(tolerates(&equal, &taint));
        let wrong = Toleration {
            value: Some("cpu".into()),
            ..equal.clone()
        };
        assert!(!tolerates(&wrong, &taint));
        let exists_all = Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        };
        assert!(tolerates(&exists_all, &taint));
        let other_effect = Toleration {
            effect: Some("NoExecute".into()),
            ..equal
        };
        assert!(!tolerates(&other_effect, &taint));
    }
}
