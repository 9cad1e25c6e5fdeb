//! Typed decoding of built-in kinds through their k8s-openapi types: it rejects wrongly
//! typed fields (400, as upstream's decoder does), drops fields the type does not know
//! (upstream prunes them for built-in kinds), and reports those unknown fields so
//! `fieldValidation=Strict|Warn` can act on them.

use serde_json::{Map, Value};

/// Round-trips a JSON object through the Rust type of a kind (read in place: the input is
/// kept for the comparison that finds unknown fields).
type Roundtrip = fn(&Value) -> Result<Value, serde_json::Error>;

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(
    v: &Value,
) -> Result<Value, serde_json::Error> {
    let typed = T::deserialize(v)?;
    serde_json::to_value(typed)
}

/// Finds the round-trip of a kind by comparing each type's `Resource` constants.
macro_rules! lookup_in {
    ($($ty:ty),* $(,)?) => {
        |group: &str, version: &str, kind: &str| -> Option<Roundtrip> {
            use k8s_openapi::Resource;
            $(
                if <$ty as Resource>::GROUP == group
                    && <$ty as Resource>::VERSION == version
                    && <$ty as Resource>::KIND == kind
                {
                    return Some(roundtrip::<$ty> as Roundtrip);
                }
            )*
            None
        }
    };
}

fn lookup(group: &str, version: &str, kind: &str) -> Option<Roundtrip> {
    let find = super::types::with_builtin_types!(lookup_in);
    find(group, version, kind)
}

/// The outcome of typed decoding.
#[derive(Debug)]
pub struct Decoded {
    /// The object as the type sees it (unknown fields dropped).
    pub object: Map<String, Value>,
    /// Dotted paths of fields the type does not know, e.g. `spec.foo`.
    pub unknown: Vec<String>,
}

/// Decodes `obj` as `group/version, Kind=kind`. Unknown kinds pass through unchanged.
/// A type error is returned as the decoder's message.
pub fn decode(
    group: &str,
    version: &str,
    kind: &str,
    obj: Map<String, Value>,
) -> Result<Decoded, String> {
    let Some(rt) = lookup(group, version, kind) else {
        return Ok(Decoded {
            object: obj,
            unknown: Vec::new(),
        });
    };
    let input = Value::Object(obj);
    let output = rt(&input).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    diff(&input, &output, &mut unknown);
    match output {
        Value::Object(object) => Ok(Decoded { object, unknown }),
        _ => Err("decoded object is not a JSON object".into()),
    }
}

/// As [`decode`] for a write that changes the stored `old`: the top-level fields `obj`
/// leaves equal to `old`'s are kept as they are and only the others go through the type.
/// `old` was itself decoded when it was written, so its fields hold nothing unknown and
/// are already in the type's form; a status patch then decodes the status alone, not the
/// whole pod. Fields the type adds by default (a `metadata` the input lacked) are not
/// taken from the partial decoding.
pub fn decode_changed(
    group: &str,
    version: &str,
    kind: &str,
    obj: Map<String, Value>,
    old: &Map<String, Value>,
) -> Result<Decoded, String> {
    let Some(rt) = lookup(group, version, kind) else {
        return Ok(Decoded {
            object: obj,
            unknown: Vec::new(),
        });
    };
    let (mut object, changed): (Map<String, Value>, Map<String, Value>) =
        obj.into_iter().partition(|(k, v)| old.get(k) == Some(v));
    if changed.is_empty() {
        return Ok(Decoded {
            object,
            unknown: Vec::new(),
        });
    }
    let input = Value::Object(changed);
    let output = rt(&input).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    diff(&input, &output, &mut unknown);
    let (Value::Object(input), Value::Object(mut output)) = (input, output) else {
        return Err("decoded object is not a JSON object".into());
    };
    for k in input.keys() {
        if let Some(v) = output.remove(k) {
            object.insert(k.clone(), v);
        }
    }
    Ok(Decoded { object, unknown })
}

/// Collects paths present in `input` but absent from `output`. Nulls count as absent on
/// both sides (an explicit null is the same as an unset field). The path is kept as a stack
/// of segments and only spelled out for an unknown field (most objects have none).
fn diff(input: &Value, output: &Value, out: &mut Vec<String>) {
    diff_at(input, output, &mut Vec::new(), out);
}

/// One step of a path: a field name or a list index.
enum Seg<'a> {
    Field(&'a str),
    Index(usize),
}

fn diff_at<'a>(input: &'a Value, output: &Value, path: &mut Vec<Seg<'a>>, out: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                match o.get(k) {
                    Some(ov) => {
                        path.push(Seg::Field(k));
                        diff_at(v, ov, path, out);
                        path.pop();
                    }
                    None if v.is_null() => {}
                    // Empty objects/arrays may be dropped by the type's serializer without
                    // being unknown; only report fields the type could not have kept.
                    None if is_empty(v) => {}
                    None => {
                        path.push(Seg::Field(k));
                        out.push(spell(path));
                        path.pop();
                    }
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (idx, (iv, ov)) in i.iter().zip(o.iter()).enumerate() {
                path.push(Seg::Index(idx));
                diff_at(iv, ov, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// `spec.containers[0].foo`.
fn spell(path: &[Seg<'_>]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Field(f) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(f);
            }
            Seg::Index(i) => {
                s.push('[');
                s.push_str(&i.to_string());
                s.push(']');
            }
        }
    }
    s
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().all(|x| x.is_null() || is_empty(x)),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: &Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn unknown_fields_are_reported_and_dropped() {
        let d = decode(
            "apps",
            "v1",
            "Deployment",
            obj(&json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "x", "bogus": 1},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "foo": "bar",
                         "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagePullPolice": "x"}]}}}
            })),
        )
        .unwrap();
        assert_eq!(
            d.unknown,
            [
                "metadata.bogus",
                "spec.foo",
                "spec.template.spec.containers[0].imagePullPolice"
            ]
        );
        assert!(d.object["spec"].get("foo").is_none());
        assert_eq!(d.object["spec"]["replicas"], 2);
    }

    #[test]
    fn wrong_types_are_errors() {
        let err = decode(
            "",
            "v1",
            "ConfigMap",
            obj(&json!({"metadata": {"name": 5}})),
        )
        .unwrap_err();
        assert!(err.contains("invalid type"), "{err}");
    }

    #[test]
    fn known_fields_survive_unchanged() {
        let input = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": "2026-11-22T05:00:00Z"},
            "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "500m"}},
                      "ports": [{"containerPort": 80}]}]}
        });
        let d = decode("", "v1", "Pod", obj(&input)).unwrap();
        assert!(d.unknown.is_empty(), "{:?}", d.unknown);
        assert_eq!(Value::Object(d.object), input);
    }

    #[test]
    fn a_change_decodes_only_the_fields_it_changed() {
        let old = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "resourceVersion": "5"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            "status": {"phase": "Pending"}
        });
        let mut new = old.clone();
        new["status"] = json!({"phase": "Running", "podIP": "10.0.0.1", "bogus": true});
        let d = decode_changed("", "v1", "Pod", obj(&new), &obj(&old)).unwrap();
        assert_eq!(d.unknown, ["status.bogus"]);
        let mut want = new.clone();
        want["status"].as_object_mut().unwrap().remove("bogus");
        assert_eq!(Value::Object(d.object.clone()), want);
        // The same answer as decoding the whole object.
        let whole = decode("", "v1", "Pod", obj(&new)).unwrap();
        assert_eq!(whole.object, d.object);
        assert_eq!(whole.unknown, d.unknown);
        // A top-level field the write removed stays removed; an unknown one is dropped.
        let mut new = old.clone();
        new.as_object_mut().unwrap().remove("status");
        new["extra"] = json!(1);
        let d = decode_changed("", "v1", "Pod", obj(&new), &obj(&old)).unwrap();
        assert_eq!(d.unknown, ["extra"]);
        assert!(d.object.get("status").is_none() && d.object.get("extra").is_none());
        assert_eq!(d.object["spec"], old["spec"]);
        // Wrong types in a changed field are still errors.
        let mut new = old.clone();
        new["status"] = json!({"phase": 3});
        assert!(decode_changed("", "v1", "Pod", obj(&new), &obj(&old)).is_err());
    }
}
