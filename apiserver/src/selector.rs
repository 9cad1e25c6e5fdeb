//! Label and field selectors, parsed as upstream's `labels.Parse` / `fields.ParseSelector`.

use serde_json::Value;

use crate::error::{ApiError, Result};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector (all requirements must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set_values(s: &str) -> Result<Vec<String>> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "unable to parse requirement: expected '(' in {s:?}"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `app=web,tier!=db,env in (a,b),!legacy`.
    pub fn parse(s: &str) -> Result<Self> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set_values(v)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), set_values(v)?)
            } else if part.contains(char::is_whitespace) || part.contains('(') {
                return Err(ApiError::BadRequest(format!(
                    "unable to parse requirement: {part:?}"
                )));
            } else {
                Requirement::Exists(part.to_owned())
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether `labels` (an object's `metadata.labels`, possibly null) satisfy the selector.
    pub fn matches(&self, labels: &Value) -> bool {
        self.matches_lookup(|k| labels.get(k).and_then(Value::as_str))
    }

    /// Whether labels read through `get` (key → value, `None` when absent) satisfy the
    /// selector.
    pub fn matches_lookup<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `field=value` / `field!=value` terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,status.phase!=Running`, checking each field against the
    /// fields the resource supports (`allowed`); others are a 400 as upstream.
    pub fn parse(s: &str, allowed: &[&str]) -> Result<Self> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::BadRequest(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !allowed.contains(&field) {
                return Err(ApiError::BadRequest(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_owned(), eq, value.trim().to_owned()));
        }
        Ok(FieldSelector(terms))
    }

    /// The selector with each field label renamed by `rename` (a served version's labels to
    /// the stored form's, as upstream's field label conversion).
    pub fn map_fields(self, rename: impl Fn(&str) -> &str) -> Self {
        FieldSelector(
            self.0
                .into_iter()
                .map(|(f, eq, v)| (rename(&f).to_owned(), eq, v))
                .collect(),
        )
    }

    /// Whether `obj` satisfies every term (fields are dotted JSON paths).
    pub fn matches(&self, obj: &serde_json::Map<String, Value>) -> bool {
        self.0
            .iter()
            .all(|(field, eq, value)| (field_value(obj, field) == *value) == *eq)
    }

    /// Whether field values read through `get` (field → value as [`field_value`] renders
    /// it, `None` meaning "") satisfy every term.
    pub fn matches_lookup<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0
            .iter()
            .all(|(field, eq, value)| (get(field).unwrap_or("") == value.as_str()) == *eq)
    }
}

/// The value of field label `field` of `obj` as upstream's field sets give it: the dotted
/// JSON path's string, or its boolean or number printed; an absent field is its Go zero
/// value (`false` for `spec.unschedulable` and `spec.hostNetwork`, `0` for
/// `status.replicas` and a Job's `status.successful`, "" otherwise). A few labels read
/// other paths, as upstream's `ToSelectableFields`: a Job's `status.successful` is
/// `status.succeeded`, a Pod's `status.podIP` the first of `status.podIPs`, an Event's
/// `source` its `source.component` (else `reportingComponent`); `status.podIPs` is accepted
/// but never set.
pub fn field_value(obj: &serde_json::Map<String, Value>, field: &str) -> String {
    let zero = match field {
        "spec.unschedulable" | "spec.hostNetwork" => "false",
        "status.replicas" | "status.successful" => "0",
        _ => "",
    };
    let value = match field {
        "status.successful" => path_value(obj, "status.succeeded"),
        "status.podIPs" => None,
        "status.podIP" => obj
            .get("status")
            .and_then(|s| s.get("podIPs"))
            .and_then(|ips| ips.get(0))
            .and_then(|ip| ip.get("ip"))
            .and_then(scalar)
            .or_else(|| path_value(obj, field)),
        "source" => path_value(obj, "source.component")
            .filter(|s| !s.is_empty())
            .or_else(|| path_value(obj, "reportingComponent")),
        _ => path_value(obj, field),
    };
    value.unwrap_or_else(|| zero.to_owned())
}

/// The scalar at the dotted JSON path `path` of `obj`, printed; `None` when absent or not a
/// scalar.
fn path_value(obj: &serde_json::Map<String, Value>, path: &str) -> Option<String> {
    let mut segs = path.split('.');
    let mut cur = obj.get(segs.next()?)?;
    for seg in segs {
        cur = cur.get(seg)?;
    }
    scalar(cur)
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_label_operator() {
        let labels = json!({"app": "web", "env": "prod"});
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("env in (dev, prod)", true),
            ("env notin (prod)", false),
            ("app", true),
            ("!app", false),
            ("!missing,app=web", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&labels),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn absent_fields_are_zero_values() {
        let node = json!({"metadata": {"name": "n"}, "spec": {}});
        let node = node.as_object().unwrap();
        assert_eq!(field_value(node, "spec.unschedulable"), "false");
        let sel = FieldSelector::parse("spec.unschedulable==false", &["spec.unschedulable"]);
        assert!(sel.unwrap().matches(node));
        let cordoned = json!({"spec": {"unschedulable": true}});
        assert_eq!(
            field_value(cordoned.as_object().unwrap(), "spec.unschedulable"),
            "true"
        );
        let job = json!({"status": {"succeeded": 2}});
        assert_eq!(
            field_value(job.as_object().unwrap(), "status.successful"),
            "2"
        );
        assert_eq!(
            field_value(&serde_json::Map::new(), "status.successful"),
            "0"
        );
        let pod = json!({"status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.2"}]}});
        assert_eq!(
            field_value(pod.as_object().unwrap(), "status.podIP"),
            "10.0.0.2"
        );
        assert_eq!(field_value(pod.as_object().unwrap(), "status.podIPs"), "");
        let event = json!({"source": {}, "reportingComponent": "kubelet"});
        assert_eq!(field_value(event.as_object().unwrap(), "source"), "kubelet");
    }

    #[test]
    fn unsupported_field_is_a_bad_request() {
        assert!(FieldSelector::parse("spec.foo=1", &["metadata.name"]).is_err());
        let f = FieldSelector::parse("metadata.name=x", &["metadata.name"]).unwrap();
        assert!(f.matches(json!({"metadata": {"name": "x"}}).as_object().unwrap()));
    }
}
